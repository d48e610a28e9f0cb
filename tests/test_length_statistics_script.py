"""scripts/length_statistics.py: the source distances it measures from the tasks' own samplers."""

from conftest import load_script


def _script():
    return load_script("length_statistics")


def test_copy_and_reverse_distances_and_what_training_never_saw():
    script = _script()
    copy = script.table("copy", 9, 16, [16, 20]).set_index("length")
    # copy of n = (l - 1) // 2 symbols: every answer sits n + 1 back; 16 -> 8 (seen), 20 -> 10 (never seen)
    assert copy.loc[16, "source_distance"] == "8" and copy.loc[16, "answer_tokens_at_unseen_distance"] == 0
    assert copy.loc[20, "source_distance"] == "10" and copy.loc[20, "share_unseen"] == 1.0
    reverse = script.table("reverse", 9, 16, [20]).set_index("length")
    # reverse: 2, 4, ..., 2n; training's longest is 14 (n = 7), so 16 and 18 are new at 20 (n = 9)
    assert reverse.loc[20, "source_distance"] == "2-18"
    assert reverse.loc[20, "answer_tokens_at_unseen_distance"] == 2 and reverse.loc[20, "answer_tokens"] == 9
    assert copy.loc[16, "training_sequences_reaching_last_position"] == 0.125  # only 16 of 9..16
