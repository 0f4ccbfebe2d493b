"""No dead config keys: every schema key is *read* by asrkit code, observed at run time.

The schema dataclasses (``asrkit.config.schema_classes``) get a recording
``__getattribute__`` for the duration of the test, and the real code paths run in this
process on the tiny experiment with the optional features on (speed perturbation, dither,
SpecAugment, spec_sub, spec_trim, list shuffle / shuffle / sort, global CMVN, dynamic
chunks with dynamic left chunks and the causal convolution,
bitransformer decoder with ``reverse_weight``, token-normalised loss, warmup scheduler,
grad clipping, ``accum_grad``, step checkpoints and pruning, CV every N steps, early
stopping): ``asrkit.bin.train`` (preflight, launch, the ranks' agreement, tokenizer, data
pipeline, model, optimizer, scheduler, training steps, CV, checkpoints), then
``asrkit.bin.recognize`` and ``asrkit.bin.export`` on its ``train.yaml``.

A read counts only when a module of the asrkit package that does not define the schema
reads the field (:func:`counts_as_use`).  So these read every field and count for none:
the loader's validation (``asrkit/config.py`` and the schema modules' ``validate``),
serialisation and copying -- ``dataclasses.asdict`` behind ``to_dict`` / ``dump_config`` /
the agreement hash and the checkpoints' config, ``dataclasses.replace``, the generated
``__eq__`` / ``__repr__`` -- and this test's own accesses.

Keys that only a path the run cannot take reads are listed in :data:`TARGETED` with that
path and why it is not run here; a targeted call of that path must read them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from pathlib import Path

import torch

import asrkit
from asrkit.config import TrainConfig, dump_config, load_config, schema_classes, to_dict
from asrkit.models.transducer.schema import JointConf, PredictorConf
from tests.helpers import distinct_utterance_list, run_tool, train_args

PACKAGE = Path(asrkit.__file__).resolve().parent
SCHEMAS = schema_classes(TrainConfig)
# The modules that define the schema (sections, their dataclass bases, the loader and the
# ``checked``/``one_of`` helpers): their reads validate or print, they are not uses.
SCHEMA_MODULES = {Path(sys.modules[base.__module__].__file__).resolve()
                  for cls in SCHEMAS for base in cls.__mro__ if dataclasses.is_dataclass(base)}
SCHEMA_MODULES |= {PACKAGE / "config.py", PACKAGE / "schema.py"}


def counts_as_use(filename: str) -> bool:
    """Whether a field read made by code of ``filename`` is a use: asrkit code outside the
    schema modules (not ``dataclasses.py``, not the ``<string>`` of a dataclass-generated
    method, not a test)."""
    path = Path(filename)
    if not path.is_absolute():
        return False
    path = path.resolve()
    return path.is_relative_to(PACKAGE) and path not in SCHEMA_MODULES


class ReadRecorder:
    """Within ``with``: each schema class's ``__getattribute__`` adds ``"Class.field"`` to
    ``reads`` when the caller's code :func:`counts_as_use`.  Restored on exit."""

    def __init__(self, classes):
        self.classes = list(classes)
        self.reads: set[str] = set()
        self._restore: list = []
        self._use: dict[str, bool] = {}  # filename -> counts_as_use

    def _patch(self, cls) -> None:
        fields = frozenset(f.name for f in dataclasses.fields(cls))
        original, name_of_cls, recorder = cls.__getattribute__, cls.__name__, self

        def __getattribute__(obj, name):
            if name in fields:
                filename = sys._getframe(1).f_code.co_filename
                use = recorder._use.get(filename)
                if use is None:
                    use = recorder._use[filename] = counts_as_use(filename)
                if use:
                    recorder.reads.add(f"{name_of_cls}.{name}")
            return original(obj, name)

        self._restore.append((cls, cls.__dict__.get("__getattribute__")))
        cls.__getattribute__ = __getattribute__

    def __enter__(self) -> "ReadRecorder":
        try:
            for cls in self.classes:
                self._patch(cls)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for cls, own in reversed(self._restore):
            if own is None:
                del cls.__getattribute__
            else:
                cls.__getattribute__ = own
        self._restore.clear()

    @contextlib.contextmanager
    def separately(self):
        """The reads of the block in a set of their own (not added to ``reads``)."""
        outer, self.reads = self.reads, set()
        try:
            yield self.reads
        finally:
            self.reads = outer


def all_keys() -> list[str]:
    return [f"{cls.__name__}.{f.name}" for cls in SCHEMAS for f in dataclasses.fields(cls)]


# ----------------------------------------------------------------------------- targeted calls
# Keys the run cannot read: key -> (the code path that reads it, why the run does not take
# it, a call of that path: fn(cfg, tiny_experiment, tmp_path) -- it must read the key).


def _nonfinite_step(cfg, exp, tmp_path):
    from asrkit.train.dist import DistContext
    from asrkit.train.executor import Executor, TrainState
    from asrkit.train.scheduler import build_optimizer, build_scheduler
    model = torch.nn.Linear(2, 2)
    opt = build_optimizer(cfg, model.parameters())
    executor = Executor(cfg, model, opt, build_scheduler(cfg, opt), DistContext(), tmp_path, progress=False)
    state = TrainState()
    executor._count_fault([{"keys": ["u1"]}], state, "the loss is not finite")  # 1 < max_nonfinite_steps
    assert state.nonfinite_in_row == 1


def _bpe_tokenizer(cfg, exp, tmp_path):
    from asrkit.text import WenetBpeTokenizer, build_tokenizer
    units, model = tmp_path / "bpe_units.txt", tmp_path / "bpe.model"
    run_tool("make_units.py", "--bpe", 30, "--bpe-model", model, exp.corpus.splits["train"].text, units)
    bpe = dataclasses.replace(cfg, tokenizer="bpe", tokenizer_conf=dataclasses.replace(
        cfg.tokenizer_conf, symbol_table_path=str(units), bpe_path=str(model)))
    assert isinstance(build_tokenizer(bpe), WenetBpeTokenizer)


def _powersgd_state(cfg, exp, tmp_path):
    from asrkit.train.dist.comm_hooks import powersgd_state
    conf = dataclasses.replace(cfg.ddp_conf, comm_hook="powersgd", powersgd_rank=2, powersgd_start_iter=7)
    state = powersgd_state(conf, cfg.seed)  # (torch's state; no process group needed to build it)
    assert (state.matrix_approximation_rank, state.start_powerSGD_iter) == (2, 7)


def _fsdp_wrap(cfg, exp, tmp_path):
    import torch.distributed as dist

    from asrkit.models import build_model
    from asrkit.text.vocabulary import Vocabulary
    from asrkit.train.dist.context import DistContext
    from asrkit.train.engines import build_engine
    from asrkit.train.engines.fsdp import FsdpEngine
    fsdp = dataclasses.replace(cfg, train_engine="torch_fsdp", fsdp_sync_module_states=True)
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "fsdp_store"), 1), rank=0, world_size=1)
    try:
        ctx = DistContext(backend="gloo")
        assert build_engine(fsdp, ctx).name == "torch_ddp"  # (one process: nothing to shard)
        model = build_model(fsdp, cfg.input_dim, Vocabulary.of_size(cfg.output_dim), load_cmvn_stats=False)
        assert FsdpEngine(fsdp, ctx).wrap(model) is model
    finally:
        dist.destroy_process_group()


def _transducer(cfg, exp, tmp_path):
    from asrkit.models.registry import build_predictor, build_transducer
    from asrkit.models.transducer.schema import JointConf, PredictorConf
    from asrkit.text.vocabulary import Vocabulary
    vocabulary = Vocabulary.of_size(cfg.output_dim)
    rnn = PredictorConf(embed_size=8, output_size=8, embed_dropout=0.0, hidden_size=8, num_layers=1)
    transducer = dataclasses.replace(
        cfg, model="transducer", predictor="rnn", predictor_conf=rnn, joint="transducer_joint",
        joint_conf=JointConf(enc_output_size=cfg.encoder_conf.output_size, join_dim=8),
        model_conf=dataclasses.replace(cfg.model_conf, transducer_weight=0.5, attention_weight=0.2,
                                       rnnt_type="modified"))
    assert build_transducer(transducer, cfg.input_dim, vocabulary, None).rnnt_type == "modified"
    for kind in ("embedding", "conv"):  # the keys of the stateless kinds
        conf = PredictorConf(embed_size=8, output_size=8, embed_dropout=0.0, n_head=2 if kind == "embedding" else None)
        assert build_predictor(dataclasses.replace(transducer, predictor=kind, predictor_conf=conf), vocabulary)


def _waveform_augmentation(cfg, exp, tmp_path):
    import numpy as np
    import soundfile
    from asrkit.data.lists import read_list
    from asrkit.data.processors import build_sample_processor
    from asrkit.text import build_tokenizer
    soundfile.write(str(tmp_path / "n.wav"), np.random.default_rng(0).normal(0, 0.1, 8000).astype(np.float32), 16000)
    (tmp_path / "n.scp").write_text(f"n {tmp_path / 'n.wav'}\n")
    dc = cfg.dataset_conf
    dc = dataclasses.replace(
        dc, reverb=True, noise=True, band_limit=True, volume_perturb=True, requantize=True,
        reverb_conf=dataclasses.replace(dc.reverb_conf, rir_scp=str(tmp_path / "n.scp")),
        noise_conf=dataclasses.replace(dc.noise_conf, noise_scp=str(tmp_path / "n.scp")))
    proc = build_sample_processor(dc, build_tokenizer(cfg), train=True, seed=1)
    assert "feat" in proc(read_list(exp.corpus.splits["dev"].data_list)[0], 0)


def _noam_hold_annealing(cfg, exp, tmp_path):
    from asrkit.train.scheduler import NoamHoldAnnealing, build_scheduler
    from asrkit.train.schema import SchedulerConf
    conf = SchedulerConf(warmup_ratio=0.1, hold_ratio=0.2, max_steps=100, decay_rate=1.0, min_lr=1e-5)
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.001)
    sched = build_scheduler(dataclasses.replace(cfg, scheduler="NoamHoldAnnealing", scheduler_conf=conf), opt)
    assert isinstance(sched, NoamHoldAnnealing) and (sched.warmup_steps, sched.hold_steps) == (10, 20)


def _finetuning(cfg, exp, tmp_path):
    from asrkit.finetune.schema import LoraConf
    from asrkit.finetune.setup import adapt
    from asrkit.models import build_model
    from asrkit.text.vocabulary import Vocabulary
    from asrkit.train.job import ModuleInit
    vocabulary = Vocabulary.of_size(cfg.output_dim)
    source = tmp_path / "source.pt"
    torch.save({"model": build_model(cfg, cfg.input_dim, vocabulary).state_dict()}, source)
    tuned = dataclasses.replace(cfg, use_lora=True, reinit_output_layers=True,
                                lora_conf=LoraConf(lora_reinit=True, lora_dropout=0.1))
    model = build_model(tuned, cfg.input_dim, vocabulary)
    adaptation = adapt(model, tuned, ModuleInit(str(source), "encoder.,ctc."))
    assert adaptation.lora and any(k.endswith(".lora_A") for k in model.state_dict())


def _branchformers(cfg, exp, tmp_path):
    from asrkit.models.registry import ENCODERS
    conf = dataclasses.replace(cfg.encoder_conf, num_blocks=1, cgmlp_linear_units=8, cgmlp_conv_kernel=3)
    for name in ("branchformer", "e_branchformer"):
        ENCODERS[name](cfg.input_dim, conf)


def _squeezeformer(cfg, exp, tmp_path):
    from asrkit.models.registry import ENCODERS
    conf = dataclasses.replace(cfg.encoder_conf, num_blocks=2, encoder_dim=16, reduce_idx=0, recover_idx=1)
    encoder = ENCODERS["squeezeformer"](cfg.input_dim, conf)
    encoder(torch.randn(1, 20, cfg.input_dim), torch.tensor([20]))


def _efficient_conformer(cfg, exp, tmp_path):
    from asrkit.models.encoder_schema import EfficientConf
    from asrkit.models.registry import ENCODERS
    conf = dataclasses.replace(cfg.encoder_conf, num_blocks=4, stride_layer_idx=0, efficient_conf=EfficientConf())
    encoder = ENCODERS["efficientConformer"](cfg.input_dim, conf)
    encoder(torch.randn(1, 20, cfg.input_dim), torch.tensor([20]))


def _whisper(cfg, exp, tmp_path):
    import yaml
    from asrkit.checkpoint.whisper import wenet_config
    from asrkit.data.feature_steps import feature_step
    from asrkit.models import build_model
    from asrkit.text import build_tokenizer
    dims = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=16, n_audio_head=2, n_audio_layer=1, n_vocab=51865,
                n_text_ctx=448, n_text_state=16, n_text_head=2, n_text_layer=1)
    path = tmp_path / "whisper.yaml"
    path.write_text(yaml.safe_dump(wenet_config(dims)), encoding="utf-8")
    whisper_cfg = load_config(path)
    tokenizer = build_tokenizer(whisper_cfg)
    model = build_model(whisper_cfg, whisper_cfg.dataset_conf.feat_dim, tokenizer.vocabulary)
    assert model.special_tokens["eot"] == tokenizer.vocabulary.eos_id  # (<|endoftext|>, as WeNet's converter writes it)
    assert model.decoder_prompt()[1] == tokenizer.language_id("zh")  # (language_conf.limited_langs: [zh])
    sample = feature_step(whisper_cfg.dataset_conf, train=False)(
        {"key": "u", "wav": torch.full((1, 1600), 0.01), "sample_rate": 16000}, None)
    assert sample["feat"].shape == (10, 80)


def _cuda_attention(cfg, exp, tmp_path):
    from asrkit.train.build import choose_attention_backend
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        choose_attention_backend(cfg, torch.device("cuda"))  # (switches a flag; needs no GPU)
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


# (preflight reads the switches and the lists' paths in every run)
_AUGMENT_KEYS = ["DatasetConf.volume_perturb_conf", "DatasetConf.band_limit_conf", "BandLimitConf.rates",
                 "BandLimitConf.band_limit_apply_prob", "ReverbConf.rir_apply_prob", "NoiseConf.noise_apply_prob",
                 "NoiseConf.noise_db_range", "VolumePerturbConf.scale_low", "VolumePerturbConf.scale_high",
                 "VolumePerturbConf.volume_apply_prob", "VolumePerturbConf.scale_distribution",
                 "DatasetConf.requantize_conf", "RequantizeConf.bits", "RequantizeConf.requantize_apply_prob"]

_TRANSDUCER_KEYS = (["TrainConfig.predictor", "TrainConfig.predictor_conf", "TrainConfig.joint",
                     "TrainConfig.joint_conf", "ModelConf.transducer_weight", "ModelConf.attention_weight",
                     "ModelConf.rnnt_type"]
                    + [f"PredictorConf.{f.name}" for f in dataclasses.fields(PredictorConf)]
                    + [f"JointConf.{f.name}" for f in dataclasses.fields(JointConf)])

TARGETED = {
    "TrainConfig.cudnn_sdpa": (
        "asrkit.train.build.choose_attention_backend (torch's cuDNN attention switch, on a CUDA device)",
        "the tiny run is on the CPU", _cuda_attention),
    "TrainConfig.max_nonfinite_steps": (
        "asrkit.train.executor.Executor._count_fault (a skipped non-finite optimizer step)",
        "the tiny run's losses and gradients are finite", _nonfinite_step),
    "TokenizerConf.bpe_path": (
        "asrkit.text.build_tokenizer with tokenizer: bpe (WenetBpeTokenizer loads the sentencepiece model)",
        "the tiny experiment's units are characters (tokenizer: char)", _bpe_tokenizer),
    "DdpConf.powersgd_rank": (
        "asrkit.train.dist.comm_hooks.powersgd_state (registered on the DDP model with comm_hook: powersgd)",
        "the tiny run is one process: no DDP model, no hook", _powersgd_state),
    "DdpConf.powersgd_start_iter": (
        "asrkit.train.dist.comm_hooks.powersgd_state (registered on the DDP model with comm_hook: powersgd)",
        "the tiny run is one process: no DDP model, no hook", _powersgd_state),
    **{key: ("asrkit.data.processors.waveform_augmentation (reverb, noise, band_limit, volume_perturb, requantize: true)",
             "the tiny experiment has no noise or RIR list", _waveform_augmentation) for key in _AUGMENT_KEYS},
    **{key: ("asrkit.text.build_tokenizer, asrkit.models.registry.build_whisper_model and "
             "asrkit.data.feature_steps.feature_step of a converted Whisper config (tokenizer/model: whisper, "
             "feats_type: log_mel_spectrogram)", "the tiny run is a char-unit model on fbank", _whisper)
       for key in ["TokenizerConf.is_multilingual", "TokenizerConf.num_languages", "DatasetConf.language_conf",
                   "LanguageConf.limited_langs",
                   "DatasetConf.log_mel_spectrogram_conf", *(f"LogMelSpectrogramConf.{k}" for k in
                                                             ("n_fft", "hop_length", "num_mel_bins", "padding"))]},
    **{key: ("asrkit.finetune.setup.adapt (use_lora, --enc_init reaching the output layers)",
             "the tiny run trains from scratch, without adapters", _finetuning)
       for key in ["TrainConfig.lora_conf", "TrainConfig.reinit_output_layers",
                   *(f"LoraConf.{f}" for f in ("lora_modules", "lora_attn_attr", "lora_list", "lora_rank",
                                               "lora_alpha", "lora_dropout", "lora_ckpt_path", "lora_reinit"))]},
    **{f"SchedulerConf.{key}": ("asrkit.train.scheduler.build_scheduler (scheduler: NoamHoldAnnealing)",
                                "the tiny run's scheduler is warmuplr", _noam_hold_annealing)
       for key in ("warmup_ratio", "hold_steps", "hold_ratio", "max_steps", "decay_rate", "min_lr")},
    **{f"TrainConfig.{key}": ("asrkit.train.engines.build_engine and FsdpEngine.wrap (train_engine: torch_fsdp)",
                              "the tiny run is one process: torch_fsdp trains it as torch_ddp", _fsdp_wrap)
       for key in ("fsdp_sharding_strategy", "fsdp_sync_module_states")},
    **{f"EncoderConf.{key}": ("asrkit.models.branchformer and asrkit.models.e_branchformer (encoder: branchformer, "
                              "e_branchformer)", "the tiny run's encoder is a conformer", _branchformers)
       for key in ("use_attn", "use_cgmlp", "cgmlp_linear_units", "cgmlp_conv_kernel", "use_linear_after_conv",
                   "gate_activation", "merge_method", "cgmlp_weight", "attn_branch_drop_rate", "merge_conv_kernel",
                   "use_ffn")},
    **{f"EncoderConf.{key}": ("asrkit.models.squeezeformer (encoder: squeezeformer)",
                              "the tiny run's encoder is a conformer", _squeezeformer)
       for key in ("encoder_dim", "reduce_idx", "recover_idx", "time_reduction_layer_type",
                   "feed_forward_expansion_factor", "dw_stride", "input_dropout_rate", "feed_forward_dropout_rate",
                   "dropout", "do_rel_shift", "cnn_norm_type", "adaptive_scale", "init_weights")},
    **{key: ("asrkit.models.efficient_conformer (encoder: efficientConformer)",
             "the tiny run's encoder is a conformer", _efficient_conformer)
       for key in [*(f"EncoderConf.{k}" for k in ("stride_layer_idx", "stride", "group_layer_idx", "group_size",
                                                   "stride_kernel", "efficient_conf")),
                   *(f"EfficientConf.{k}" for k in ("stride_layer_idx", "stride", "group_layer_idx", "group_size",
                                                     "stride_kernel"))]},
    **{key: ("asrkit.models.registry.build_transducer and build_predictor (model: transducer)",
             "the tiny run trains model: asr_model", _transducer) for key in _TRANSDUCER_KEYS},
}


def _config_version_changes_what_loads(tmp_path: Path) -> None:
    import yaml
    raw = {"encoder": "conformer", "encoder_conf": {"pos_enc_layer_type": "rel_pos"}}
    for version, meaning in ((1, "rel_pos_xl"), (2, "rel_pos")):
        path = tmp_path / f"version_{version}.yaml"
        path.write_text(yaml.safe_dump({**raw, "config_version": version}), encoding="utf-8")
        assert load_config(path).encoder_conf.pos_enc_layer_type == meaning


# Keys load_config reads from the raw YAML, before the config object exists (no object read
# can observe them): each check shows that the key changes what loads.
RAW_KEYS = {
    "TrainConfig.config_version": _config_version_changes_what_loads,  # asrkit.config_versions.upgrade
}


# ----------------------------------------------------------------------------- the test


@contextlib.contextmanager
def process_state_kept():
    """The in-process CLIs set the root logger's handlers and the intra-op thread count:
    put them back (closing the run's log file)."""
    root = logging.getLogger()
    handlers, level, threads = list(root.handlers), root.level, torch.get_num_threads()
    try:
        yield
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)
        torch.set_num_threads(threads)


def all_features_config(exp, path: Path) -> Path:
    return exp.config(
        path, encoder_conf={"use_dynamic_chunk": True, "use_dynamic_left_chunk": True, "causal": True},
        decoder="bitransformer", decoder_conf={"r_num_blocks": 1},
        model_conf={"ctc_weight": 0.3, "lsm_weight": 0.1, "reverse_weight": 0.3, "length_normalized_loss": True},
        dataset_conf={"speed_perturb": True, "speeds": [0.9, 1.0, 1.1],
                      "fbank_conf": {"dither": 0.1},
                      "spec_aug": True, "spec_aug_conf": {"num_t_mask": 1, "num_f_mask": 1, "max_t": 5, "max_f": 3},
                      "spec_sub": True, "spec_sub_conf": {"num_t_sub": 1, "max_t": 5},
                      "spec_trim": True, "spec_trim_conf": {"max_t": 3},
                      "list_shuffle": True, "shuffle": True, "sort": True,
                      "batch_conf": {"batch_type": "static", "batch_size": 2}},
        scheduler="warmuplr", scheduler_conf={"warmup_steps": 2}, grad_clip=5.0, accum_grad=2,
        max_epoch=1, save_interval=1, keep_checkpoint_max=1, cv_interval=2, early_stop_patience=1)


def test_serialisation_and_validation_reads_do_not_count(tiny_experiment, tmp_path):
    """The recorder's exclusions: loading, validating, dumping, comparing, copying and
    hashing a config read every field and count none of them."""
    from asrkit.train import agreement
    config = all_features_config(tiny_experiment, tmp_path / "c.yaml")
    cfg = load_config(config)
    with ReadRecorder(SCHEMAS) as rec:
        cfg = load_config(config)
        dump_config(cfg, tmp_path / "dumped.yaml")
        assert load_config(tmp_path / "dumped.yaml") == cfg and repr(cfg)
        copy = dataclasses.replace(cfg, accum_grad=3)
        agreement.fingerprint(to_dict(copy), agreement.job_files(to_dict(cfg), "a", "b"))
        assert rec.reads == set()
        _ = cfg.dataset_conf.spec_aug_conf.max_f  # a test's own read does not count either
        assert rec.reads == set()
    assert "__getattribute__" not in type(cfg).__dict__  # restored


def test_every_schema_key_is_read_by_code(tiny_experiment, tmp_path, monkeypatch):
    """A key in a schema that no code reads is a lie to the user: it must not exist."""
    from asrkit.bin import export, recognize, train
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):  # one process, launched plainly
        monkeypatch.delenv(var, raising=False)
    exp, split = tiny_experiment, tiny_experiment.corpus.splits
    config = all_features_config(exp, tmp_path / "c.yaml")
    # 8 utterances, batches of 2, accum_grad 2: two optimizer steps, CV at step 2 and at the epoch end.
    train_list = distinct_utterance_list(split["train"].data_list, tmp_path / "train.list", 8)
    cv_list = distinct_utterance_list(split["dev"].data_list, tmp_path / "cv.list", 4)
    test_list = distinct_utterance_list(split["test"].data_list, tmp_path / "test.list", 2)
    model_dir = tmp_path / "exp"
    resolved, ckpt = model_dir / "train.yaml", model_dir / "epoch_0.pt"

    with ReadRecorder(SCHEMAS) as rec, process_state_kept():
        assert train.main(train_args(exp, model_dir, config, train_list, cv_list)) == 0
        assert recognize.main(["--config", str(resolved), "--checkpoint", str(ckpt), "--data", str(test_list),
                               "--result_dir", str(tmp_path / "decode"), "--num_threads", "1",
                               "--modes", "ctc_greedy_search", "attention_rescoring"]) == 0
        assert export.main(["--config", str(resolved), "--checkpoint", str(ckpt),
                            "--output", str(tmp_path / "final.zip")]) == 0
        run_reads = set(rec.reads)

        cfg = load_config(resolved)
        targeted_reads = {}
        for key, (_path, _why, call) in TARGETED.items():
            with rec.separately() as reads:
                call(cfg, exp, tmp_path)
            targeted_reads[key] = reads

    keys = all_keys()
    assert not set(TARGETED) - set(keys), f"TARGETED lists keys the schema lacks: {sorted(set(TARGETED) - set(keys))}"
    stale = sorted(k for k in TARGETED if k in run_reads)
    assert not stale, f"the run reads these now; take them out of TARGETED: {', '.join(stale)}"
    missed = [f"{k} (expected from {TARGETED[k][0]})" for k in TARGETED if k not in targeted_reads[k]]
    assert not missed, "targeted calls that no longer read their key:\n  " + "\n  ".join(missed)
    for key, check in RAW_KEYS.items():
        check(tmp_path)
    unread = [k for k in keys if k not in run_reads and k not in TARGETED and k not in RAW_KEYS]
    assert not unread, ("schema keys no code reads (not in the tiny train/CV/decode/export run, nor in "
                        "TARGETED): " + ", ".join(unread))
