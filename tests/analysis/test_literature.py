"""posenc.analysis.literature: the registered claims, each naming only encoders, scalings, mixers and tasks that
exist (a renamed registry key would otherwise turn a claim "not testable" without a word)."""

from posenc.analysis.literature import CLAIMS, claims_for


def test_registry():
    keys = [c.key for c in CLAIMS]
    assert len(keys) == len(set(keys))
    assert keys == [
        "kazemnejad2023_mean_rank",
        "kazemnejad2023_copy",
        "kazemnejad2023_reverse",
        "press2022_lm",
        "ruoss2023_copy",
        "ruoss2023_reverse",
        "zoology2023_retrieval",
        "zoology2023_retrieval_mixers",
        "peng2023_lm",
        "peng2023_passkey",
        "sun2023_xpos",
    ]  # peng2023_copy dropped: linear interpolation wins copy by
    # construction
    assert all(c.expect and c.windows and c.source and c.statement for c in CLAIMS)
    assert {c.task for c in claims_for({"copy"})} == {"copy"} and claims_for(set()) == []
    lm = ["press2022_lm", "peng2023_lm", "peng2023_passkey", "sun2023_xpos"]
    assert [c.key for c in claims_for({"lm", "passkey"})] == lm


def test_every_side_and_task_a_claim_names_is_in_the_registry():
    """Fails when an encoder, a RoPE scaling method, a mixer or a task is renamed without its claims."""
    from posenc.analysis.report import REFERENCE
    from posenc.encoders import ENCODERS
    from posenc.functional.rope_scaling import ROPE_SCALING
    from posenc.nn.mixers import MIXERS
    from posenc.tasks import TASKS

    named = {s for c in CLAIMS for s in (*c.sides(), *(r.side for r in c.reported))}
    assert {s.encoder for s in named} <= set(ENCODERS), {s.encoder for s in named} - set(ENCODERS)
    assert {s.scaling for s in named} <= set(ROPE_SCALING), {s.scaling for s in named} - set(ROPE_SCALING)
    assert {s.mixer for s in named} <= set(MIXERS), {s.mixer for s in named} - set(MIXERS)
    assert all(s.encoder == "nope" for s in named if s.mixer != "attention")  # what the config allows
    tasks = {t for c in CLAIMS for t in c.tasks}
    assert tasks <= set(TASKS), tasks - set(TASKS)
    assert REFERENCE.encoder in ENCODERS
