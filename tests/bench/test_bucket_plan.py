"""bench/bucket_plan.py: the plan figure of issue 57 for AISHELL-1's durations -- padding
and distinct batch shapes of ``bucket_frames`` against the GPU stage's ``dynamic`` batches."""
from __future__ import annotations

from bench.bucket_plan import AISHELL_TRAIN_UTTERANCES, aishell_list, main, plan_figures


def test_aishell_plan_bounds_padding_and_shapes(capsys):
    seconds, tokens = aishell_list(AISHELL_TRAIN_UTTERANCES)
    assert 140 < seconds.sum() / 3600 < 160  # AISHELL-1's 150 h
    dynamic = plan_figures("dynamic", seconds, tokens, world=8)
    buckets = plan_figures("bucket_frames", seconds, tokens, world=8, num_buckets=16)
    assert dynamic["frame_padding"] > 0.25 and dynamic["shapes"] > 300  # the GPU stage's 29-33 %
    assert buckets["frame_padding"] <= 0.08 and buckets["shapes"] <= 40
    assert buckets["token_padding"] < dynamic["token_padding"]
    assert main(["--utterances", "3000", "--buckets", "16"]) == 0
    assert "bucket_frames, 16 buckets" in capsys.readouterr().out
