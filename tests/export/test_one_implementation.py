"""One implementation of each search: asrkit/export defines none (only delegating
methods), the scripted module's searches are compiled from asrkit.decode, and a
dictionary with <sos/eos> at id 2 (WeNet's layout) decodes correctly, eager and scripted."""
import ast
import re
from pathlib import Path

import pytest
import torch

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.decode import DecodingOptions, decode
from asrkit.decode.modes import runnable_modes
from asrkit.export import script_model
from asrkit.models import build_model
from asrkit.text.vocabulary import Vocabulary
from tests.helpers import REPO
from tests.models.tiny import TINY, merge

FEAT = dict(sample_rate=16000, num_mel_bins=20, frame_length=25.0, frame_shift=10.0)
SEARCH_NAME = re.compile(r"log_add|beam_search|greedy|rescor|teacher_forced|decoder_inputs|decoder_io|nbest")
SEARCH_INTERNALS = re.compile(r"log_add|log1p|_slot|_next_index|PrefixBeamSearch|AttentionBeamSearch|topk|"
                              r"beam_pb|pnb|children\[|children\.get|_order_desc|stable_order")


def export_sources():
    return sorted(Path(REPO, "asrkit", "export").glob("*.py"))


def test_export_defines_no_search():
    for path in export_sources():
        text = path.read_text(encoding="utf-8")
        assert not SEARCH_INTERNALS.search(text), (path, SEARCH_INTERNALS.search(text).group())
        tree = ast.parse(text)
        top_level = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
        assert not [name for name in top_level if SEARCH_NAME.search(name)], path
        for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
            for method in (node for node in cls.body if isinstance(node, ast.FunctionDef)):
                if not SEARCH_NAME.search(method.name):
                    continue
                body = [s for s in method.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                source = ast.unparse(body[0]) if len(body) == 1 else ""
                assert isinstance(body[0], ast.Return) and len(body) == 1, (path, method.name)
                assert source.startswith(("return self.searcher.", "return self.decode(")), (method.name, source)


@pytest.fixture(scope="module")
def scripted():
    torch.manual_seed(0)
    model = build_model(build(TrainConfig, TINY), 20, Vocabulary.of_size(9)).eval()
    return script_model(model, ["<blank>", "<unk>", *"abcdef", "<sos/eos>"], **FEAT)


def test_scripted_searches_are_compiled_from_asrkit_decode(scripted):
    # (TorchScript may mangle a type compiled more than once in a process: ___torch_mangle_N)
    assert re.fullmatch(r"__torch__\.asrkit\.decode\.searcher\.(___torch_mangle_\d+\.)?Searcher",
                        scripted.searcher._c._type().qualified_name())
    searcher = scripted.searcher
    assert "__torch__.asrkit.decode.ctc_search.ctc_prefix_beam_search_nbest" in searcher.ctc_nbest.code
    assert "__torch__.asrkit.decode.ctc_search.ctc_greedy_search" in searcher.ctc_greedy.code
    assert "__torch__.asrkit.decode.attention_search.AttentionBeamSearch" in searcher.attention_beam.code
    assert "__torch__.asrkit.decode.attention_search.pick_rescored" in searcher.attention_rescoring.code
    rescoring = searcher.rescoring_scores.code
    assert "__torch__.asrkit.decode.attention_search.teacher_forced_scores" in rescoring
    assert "__torch__.asrkit.decode.attention_search.decoder_inputs" in rescoring
    for method in ("decode", "ctc_prefix_beam_search_nbest"):  # the wrapper only calls the searcher
        code = getattr(scripted, method).code
        assert "self.searcher" in code, method
        assert all(name.endswith("ScriptableAsr") for name in re.findall(r"__torch__\.asrkit\.export[\w.]*", code))


@pytest.fixture(scope="module")
def sos_at_2():
    """WeNet's dictionary layout (<blank> 0, <unk> 1, <sos/eos> 2): a model overfit to
    three utterances of random features."""
    units = ["<blank>", "<unk>", "<sos/eos>", *"abcdefg"]
    vocabulary = Vocabulary.from_symbols(units)
    cfg = build(TrainConfig, merge(TINY, {"model_conf": {"ctc_weight": 0.5, "lsm_weight": 0.0},
                                          "decoder_conf": {"num_blocks": 1}}))
    torch.manual_seed(0)
    model = build_model(cfg, 20, vocabulary)
    assert (model.sos, model.eos, model.blank_id, model.vocab_size) == (2, 2, 0, 10)
    g = torch.Generator().manual_seed(5)
    lengths = torch.tensor([60, 48, 36])
    x = torch.randn(3, 60, 20, generator=g)
    for b, n in enumerate(lengths.tolist()):
        x[b, n:] = 0.0
    targets = [[3, 9, 4, 5, 9], [6, 7, 3, 8], [9, 3, 3]]  # ids after <sos/eos>, up to the last one
    y = torch.nn.utils.rnn.pad_sequence([torch.tensor(t) for t in targets], batch_first=True, padding_value=-1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    model.train()
    for _ in range(200):  # (100 left the attention mode one token short on some CPUs' rounding)
        loss = model(x, lengths, y, torch.tensor([len(t) for t in targets]))["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), units, x, lengths, targets


def test_sos_eos_at_id_2_decodes_correctly_eager_and_scripted(sos_at_2):
    """Every mode gives the transcripts (ids 3.., no <sos/eos>), eager and exported alike."""
    model, units, x, lengths, targets = sos_at_2
    modes = runnable_modes(model)  # the CTC/attention modes
    expected = decode(model, x, lengths, DecodingOptions(modes=modes, beam_size=4))
    for mode in modes:
        assert expected[mode] == targets, mode
    exported = script_model(model, units, **FEAT)
    assert exported.sos_symbol() == exported.eos_symbol() == 2
    with torch.no_grad():
        got = exported.decode(x, lengths, beam_size=4, modes=modes)
        assert got == expected
