"""Command-line values (posenc.running.arguments): every bad value is one error line naming its option."""

import pytest

from posenc.encoders import ENCODERS
from posenc.errors import PosencError
from posenc.files import check_out_folder
from posenc.running.arguments import (
    MAX_DISTANCE,
    check_eval_options,
    check_factor,
    check_max_distance,
    parse_encoders,
    parse_lengths,
    parse_scalings,
)  # fmt: skip
from posenc.running.extrapolate import scaling_label


def test_parse_lengths():
    assert parse_lengths("512,2048, 8192,512") == [512, 2048, 8192]
    assert parse_lengths("16") == [16]


@pytest.mark.parametrize("text", ["²", "6²", "٣", "1e3", "0x10", "", "5,", "+5", "-8", "0", "99999999", "1.5"])
def test_parse_lengths_refuses_anything_but_ascii_positive_integers_in_one_line(text):
    with pytest.raises(PosencError) as err:
        parse_lengths(text)
    message = str(err.value)
    assert message.startswith("--lengths: ") and len(message.splitlines()) == 1


def test_parse_scalings():
    methods = parse_scalings("none, yarn,linear,yarn")
    assert [scaling_label(s) for s in methods] == ["none", "yarn", "linear"]
    assert [scaling_label(s) for s in parse_scalings("none,ntk", 4.0)] == ["none", "ntk:4"]
    with pytest.raises(PosencError, match="unknown method 'rope'; known methods: none, linear"):
        parse_scalings("rope")
    with pytest.raises(PosencError, match="--rope-factor must be a positive number"):
        parse_scalings("yarn", 0.0)


def test_parse_encoders_defaults_to_the_whole_registry():
    assert parse_encoders(None) == list(ENCODERS)
    assert parse_encoders("t5,rope") == ["t5", "rope"]
    with pytest.raises(PosencError, match="unknown encoder .bogus.; known encoders: nope"):
        parse_encoders("rope,bogus")


@pytest.mark.parametrize(("check", "value", "message"), [
    (lambda: check_eval_options(0, "cpu"), None, "--sequences must be >= 1, got 0"),
    (lambda: check_eval_options(None, "tpu"), None, "--device must be auto, cpu or cuda; got 'tpu'"),
    (lambda: check_max_distance(0), None, f"--max-distance must be between 1 and {MAX_DISTANCE}, got 0"),
    (lambda: check_max_distance(MAX_DISTANCE + 1), None, "--max-distance must be between 1"),
    (lambda: check_factor(0.5), None, "--factor must be a finite number >= 1, got 0.5"),
    (lambda: check_factor(float("nan")), None, "--factor must be a finite number >= 1, got nan"),
])  # fmt: skip
def test_checks_refuse_in_one_line(check, value, message):
    with pytest.raises(PosencError) as err:
        check()
    assert str(err.value).startswith(message) and len(str(err.value).splitlines()) == 1


def test_checks_accept_the_edges():
    check_eval_options(None, "auto")
    check_eval_options(1, "cuda")
    check_max_distance(1)
    check_max_distance(MAX_DISTANCE)
    check_factor(1.0)


def test_parse_scalings_reads_method_options_after_a_colon():
    from posenc.functional.rope_scaling_spec import RopeScaling

    got = parse_scalings("none,yarn:beta_fast=16,beta_slow=2,llama3:low_freq_factor=2,high_freq_factor=8,ntk")
    assert got == [
        RopeScaling("none"),
        RopeScaling("yarn", None, (("beta_fast", 16.0), ("beta_slow", 2.0))),
        RopeScaling("llama3", None, (("high_freq_factor", 8.0), ("low_freq_factor", 2.0))),
        RopeScaling("ntk"),
    ]
    assert parse_scalings("yarn:truncate=false,original_max_position_embeddings=16", 4.0) == [
        RopeScaling("yarn", 4.0, (("original_max_position_embeddings", 16), ("truncate", False)))
    ]
    assert [s.label() for s in parse_scalings("yarn,yarn:beta_fast=8")] == ["yarn", "yarn(beta_fast=8)"]
    # one label per setting: defaults given explicitly and the order of options do not make another row
    assert parse_scalings("yarn:beta_fast=32,yarn") == [RopeScaling("yarn")]
    assert parse_scalings("yarn:beta_slow=2,beta_fast=16") == parse_scalings("yarn:beta_fast=16,beta_slow=2")


@pytest.mark.parametrize(("text", "message"), [
    ("yarn:beta=3", "--rope-scaling: yarn has no option 'beta'; its options: beta_fast=, beta_slow="),
    ("yarn:beta_fast", "--rope-scaling: yarn: option beta_fast needs a value (beta_fast=...)"),
    ("yarn:beta_fast=16,beta_fast=8", "--rope-scaling: yarn: option beta_fast given twice"),
    ("yarn:beta_fast=x", "--rope-scaling: yarn: beta_fast must be a number (float), got 'x'"),
    ("yarn:truncate=maybe", "--rope-scaling: yarn: truncate must be true or false, got 'maybe'"),
    ("yarn:beta_fast=1,beta_slow=2", "--rope-scaling: yarn: beta_fast must be > beta_slow"),
    ("beta_fast=3", "--rope-scaling: option 'beta_fast=3' follows no method"),
    ("none,beta_fast=3", "--rope-scaling: option 'beta_fast=3' follows no method"),
    ("none:x=1", "--rope-scaling: none has no option 'x'"),
    ("llama3:low_freq_factor=-1", "--rope-scaling: llama3: option low_freq_factor must be a finite number > 0"),
    ("llama3:low_freq_factor=5", "--rope-scaling: llama3: need high_freq_factor > low_freq_factor > 0"),
    (
        "yarn:original_max_position_embeddings=1.5",
        "--rope-scaling: yarn: original_max_position_embeddings must be a number (int)",
    ),
])  # fmt: skip
def test_parse_scalings_refuses_bad_options_in_one_line(text, message):
    with pytest.raises(PosencError) as err:
        parse_scalings(text)
    assert str(err.value).startswith(message) and len(str(err.value).splitlines()) == 1


@pytest.fixture
def places(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "worktree").mkdir()
    (tmp_path / "worktree" / ".git").write_text("gitdir: elsewhere\n")  # a worktree's or submodule's .git file
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"w")
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "config.yaml").write_text("x")
    (tmp_path / "started" / "train.log").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


@pytest.mark.parametrize(("given", "message"), [
    ("", "--out '': it is the working directory ("),
    (".", "--out .: it is the working directory ("),
    ("{tmp}/work", "--out {tmp}/work: it is the working directory"),
    ("{tmp}/repo", "--out {tmp}/repo: it is the root of a git repository (it holds .git)"),
    ("{tmp}/worktree", "--out {tmp}/worktree: it is the root of a git repository"),
    ("{tmp}/run", "--out {tmp}/run: it is a run folder (it holds checkpoint.pt)"),
    ("{tmp}/started", "--out {tmp}/started: it is a run folder (it holds config.yaml)"),
    ("{tmp}/dangling", "--out {tmp}/dangling: it is a symlink to {tmp}/missing, which does not exist"),
])  # fmt: skip
def test_check_out_folder_refuses_places_that_are_no_result_folder(places, given, message):
    with pytest.raises(PosencError) as err:
        check_out_folder(given.format(tmp=places))
    assert str(err.value).startswith(message.format(tmp=places)) and len(str(err.value).splitlines()) == 1


def test_check_out_folder_accepts_result_folders_and_follows_links(places):
    (places / "results" / "runs" / "r").mkdir(parents=True)  # a folder holding runs, not a run
    (places / "results" / "runs" / "r" / "checkpoint.pt").write_bytes(b"w")
    (places / "notes").mkdir()
    (places / "notes" / "config.yaml").write_text("a config of the user's own, no run beside it")
    assert check_out_folder(places / "results") == places / "results"
    assert check_out_folder(places / "notes") == places / "notes"
    assert check_out_folder("new/tables") == places / "work" / "new" / "tables"
    (places / "link").symlink_to(places / "results")
    assert check_out_folder(places / "link") == places / "results"
    assert check_out_folder(".", working_directory=True) == places / "work"  # posenc report . in its folder
    with pytest.raises(PosencError, match="git repository"):
        (places / "to-repo").symlink_to(places / "repo")
        check_out_folder(places / "to-repo")
