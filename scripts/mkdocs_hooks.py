"""The documentation site's build hooks (mkdocs.yml: ``hooks``), and the tables they generate.

MkDocs reads only ``docs/``; the committed results and the worked example live beside it. At build time:

* ``results/**`` (reports, their tables and figures) and ``examples/**`` join the site under the same paths,
  so ``docs/experiments/headline.md`` shows ``results/headline/steps_to_learn.png`` and links to
  ``results/headline/report.md`` (rendered as a page of its own);
* links in the pages are written as the repository sees them (``../results/...`` from ``docs/``, which GitHub
  follows too) and rewritten to the site's copy;
* ``<!-- posenc:encoders -->`` and ``<!-- posenc:tasks -->`` in a page become tables made from the registries
  (``posenc.encoders.ENCODERS``, ``posenc.tasks.TASKS``) and each key's ``conf/<group>/<key>.yaml``.

``python scripts/mkdocs_hooks.py`` prints README's encoder list (tests/test_docs.py keeps README equal to it).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# repository folders outside docs/ that the site carries, and the files of them it takes
CARRIED = {"results": (".md", ".png"), "examples": (".md", ".py", ".toml")}
# a row per (run, length): past 300 rows a paragraph naming the .csv/.parquet, which the site does not carry
LEFT_OUT = {"extrapolation.md"}
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")


# -- the tables --------------------------------------------------------------------------------------------
def _registry(group: str):
    from posenc.plugins import description

    if group == "encoder":
        from posenc.encoders import ENCODERS as registry
    else:
        from posenc.tasks import TASKS as registry
    return [(key, description(registry[key])) for key in registry.builtins()]


def _options(group: str, key: str) -> str:
    """``key=default`` for each option of ``conf/<group>/<key>.yaml`` (``name`` left out)."""
    conf = yaml.safe_load((ROOT / "conf" / group / f"{key}.yaml").read_text()) or {}
    return ", ".join(f"`{k}={_value(v)}`" for k, v in conf.items() if k != "name")


def _value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def registry_table(group: str) -> str:
    """A Markdown table of a registry: key, its one-line description, its options with their defaults."""
    rows = [f"| `{key}` | {text.replace('|', '&#124;')} | {_options(group, key)} |" for key, text in _registry(group)]
    return (
        "\n".join(
            [
                "| key | description (`posenc " + group + "s`) | options (defaults: `conf/" + group + "/<key>.yaml`) |",
                "|---|---|---|",
                *rows,
            ]
        )
        + "\n"
    )


def readme_encoder_list() -> str:
    """README's encoder list: one line per registered encoder, its key and description."""
    return "".join(f"- `{key}`: {text}\n" for key, text in _registry("encoder"))


# -- the hooks ---------------------------------------------------------------------------------------------
def on_files(files, config):
    from mkdocs.structure.files import File

    for folder, suffixes in CARRIED.items():
        for path in sorted((ROOT / folder).rglob("*")):
            if (
                path.is_file()
                and path.suffix in suffixes
                and path.name not in LEFT_OUT
                and not any(p.startswith(".") for p in path.relative_to(ROOT).parts)
            ):
                uri = path.relative_to(ROOT).as_posix()
                if files.get_file_from_path(uri) is None:
                    files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def _site_link(target: str, page_uri: str) -> str:
    """``target`` as written in ``docs/<page_uri>`` (the repository's view), as the site must read it."""
    if re.match(r"^[a-z]+:|^#|^/", target):
        return target
    path, _, anchor = target.partition("#")
    repo_path = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_uri), path))
    top = repo_path.split("/", 1)[0]
    if top not in CARRIED:
        return target
    new = posixpath.relpath(repo_path, posixpath.dirname(page_uri) or ".")
    return new + ("#" + anchor if anchor else "")


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    if uri.split("/", 1)[0] in CARRIED:  # a carried file links as the site already places it
        return markdown
    markdown = markdown.replace("<!-- posenc:encoders -->", registry_table("encoder"))
    markdown = markdown.replace("<!-- posenc:tasks -->", registry_table("task"))
    return LINK.sub(lambda m: m.group(1) + _site_link(m.group(2), uri) + m.group(3), markdown)


if __name__ == "__main__":
    print(readme_encoder_list(), end="")
