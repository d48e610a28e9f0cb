"""README and the documentation site (issue 41): README's encoder list is the registry's, the site's pages are
all in its nav, the hand-written encoder and task tables name exactly the registered keys, every committed
results folder says which script rebuilds it, and ``mkdocs build --strict`` passes where mkdocs is installed."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def hooks():
    return load_script("mkdocs_hooks")


def _readme_encoder_list() -> str:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- encoders:[^\n]*-->\n(.*?)<!-- /encoders -->", readme, flags=re.S)
    assert block, "README has lost its encoder list (between <!-- encoders: ... --> and <!-- /encoders -->)"
    return block.group(1)


def test_readmes_encoder_list_is_the_registry_with_its_descriptions(hooks):
    from posenc.encoders import ENCODERS

    listed = _readme_encoder_list()
    assert listed == hooks.readme_encoder_list(), "README's encoder list is stale: python scripts/mkdocs_hooks.py"
    assert re.findall(r"^- `([^`]+)`", listed, flags=re.M) == ENCODERS.builtins()


def test_readme_is_short_and_points_to_the_site():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert 'pip install -e ".[docs]"' in readme and "mkdocs serve" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def _table_keys(page: str, heading: str) -> list[str]:
    """The first column of the hand-written table under ``## heading`` of ``page`` (the one with a `key` header
    that the build does not generate)."""
    section = page.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.M)


def test_the_encoder_and_task_tables_name_exactly_the_registered_keys(hooks):
    from posenc.encoders import ENCODERS
    from posenc.tasks import TASKS

    page = (DOCS / "encoders-and-tasks.md").read_text()
    assert "<!-- posenc:encoders -->" in page and "<!-- posenc:tasks -->" in page  # the generated tables
    assert sorted(_table_keys(page, "Encoders")) == sorted(ENCODERS.builtins())
    assert sorted(_table_keys(page, "Tasks")) == sorted(TASKS.builtins())
    generated = hooks.registry_table("encoder")
    assert [f"| `{key}` |" in generated for key in ENCODERS.builtins()] == [True] * len(ENCODERS.builtins())
    assert "`init_threshold=null`" in generated  # options with their defaults, from conf/encoder/fire.yaml


def _nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_of_the_site_is_in_its_nav():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    nav = _nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages


def test_every_committed_results_folder_says_which_script_rebuilds_it():
    table = (DOCS / "reproducing.md").read_text()
    for folder in sorted(p for p in (ROOT / "results").iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.name in ("runs", "multirun") or folder.name.startswith("kernels-"):
            continue
        assert f"| [`results/{folder.name}`]" in table, f"docs/reproducing.md does not list results/{folder.name}"


def test_the_docs_extra_installs_the_site_tooling():
    tomllib = pytest.importorskip("tomllib")
    docs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["docs"]
    names = {re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0] for dep in docs}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings"} <= names
    assert any(dep.startswith("mkdocstrings[python]") for dep in docs)


def test_links_out_of_docs_reach_the_sites_copy_of_results_and_examples(hooks):
    assert (
        hooks._site_link("../../results/headline/report.md", "experiments/headline.md")
        == "../results/headline/report.md"
    )
    assert hooks._site_link("../results/first_run/README.md#x", "getting-started.md") == "results/first_run/README.md#x"
    assert hooks._site_link("measuring.md", "usage.md") == "measuring.md"
    assert hooks._site_link("https://example.org/a.md", "usage.md") == "https://example.org/a.md"


@pytest.mark.integration
@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None, reason='mkdocs is not installed: pip install -e ".[docs]"'
)
def test_the_site_builds_strictly(tmp_path):
    """A broken link, a page missing from docs/, or a `::: posenc.functional...` naming a renamed object fails."""
    # never --quiet: it drops the warnings --strict counts, and a broken link passes
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "site" / "results" / "headline" / "steps_to_learn.png").is_file()
    assert "init_threshold=null" in (tmp_path / "site" / "encoders-and-tasks" / "index.html").read_text()
