"""The results side of posenc: tables, aggregates, intervals, verdicts, figures and reports, from run folders'
files and result tables alone. Nothing in this package imports torch (tests/test_imports.py checks every module
of it), so ``posenc compare``'s aggregation, ``posenc report`` and ``posenc runs`` work without a model.

Modules, in the order data flows: ``run_folder`` (a run's config, metrics, identity and learned flag, read
once; the training table) -> ``store`` (the three result tables, a run's identity, run-neutral keys) and
``tables`` (writing and reading them) -> ``mastery`` (when a configuration counts as learned, which seeds
are compared) -> ``compare`` and ``stats`` (aggregates and intervals) -> ``claims``
and ``evidence`` (verdicts on published claims), ``selection`` (``--choose``) -> ``report``, ``plots``,
``views``, ``kernel_views`` (report.md and figures), ``printing`` (what the CLI prints); ``pipeline`` runs
compare and report as all-or-nothing writes with ``folders``.
"""
