"""MkDocs hooks.

- Serve the repository's figures/ folder as the site's figures/: the experiments write their
  figures into ``figures/`` at the repository root, where the README shows them, and the
  documentation links to the same files (``figures/NAME.png`` relative to docs/) instead of
  keeping copies.
- Show the package's Sphinx-style roles (``:func:`name```, ``:math:`...```) as plain code:
  the docstrings use them and mkdocstrings does not interpret them.
"""

import re
from pathlib import Path

from mkdocs.structure.files import File

FIGURES = Path(__file__).resolve().parents[1] / "figures"
ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj|exc|math):(?=<code>)")


def on_files(files, config):
    for path in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"figures/{path.name}", abs_src_path=str(path)))
    return files


def on_page_content(html, page, config, files):
    return ROLE.sub("", html)
