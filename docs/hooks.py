"""MkDocs hooks.

- Serve the repository's figures/ folder as the site's figures/: the experiments write their
  figures into ``figures/`` at the repository root, where the README shows them, and the
  documentation links to the same files (``figures/SCRIPT/NAME.png`` relative to docs/) instead of
  keeping copies.
- Show the package's Sphinx-style roles (``:func:`name```, ``:math:`...```) as plain code:
  the docstrings use them and mkdocstrings does not interpret them.
- Make the copy button of a code block with ``>>>`` prompts (a doctest) copy the code
  alone: the block gets a ``data-copy`` attribute, which material's copy button copies
  instead of the text shown, holding its ``>>>`` and ``...`` lines without the prompts and
  none of the output lines. Blocks without prompts copy as shown.
"""

import html
import re
from pathlib import Path

from mkdocs.structure.files import File

FIGURES = Path(__file__).resolve().parents[1] / "figures"
ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj|exc|math):(?=<code>)")


def on_files(files, config):
    for path in sorted(FIGURES.glob("*/*.png")):
        files.append(File.generated(config, f"figures/{path.parent.name}/{path.name}", abs_src_path=str(path)))
    return files


# A highlighted block: its opening <div ... highlight ...> tag, then <pre ...><code ...>, the code, </code>.
BLOCK = re.compile(r'(<div class="[^"]*\bhighlight\b[^"]*")(>\s*<pre[^>]*>(?:<span></span>)?<code[^>]*>)(.*?)(</code>)',
                   flags=re.S)
TAG = re.compile(r"<[^>]+>")


def doctest_source(text):
    """The code of a doctest's text: its ``>>>`` and ``...`` lines without the prompts (the
    output lines left out); None for a text without ``>>>`` prompts."""
    lines = text.splitlines()
    if not any(line.startswith(">>>") for line in lines):
        return None
    code = [line[4:] if len(line) > 3 else "" for line in lines
            if line.startswith((">>> ", "... ")) or line in (">>>", "...")]
    return "\n".join(code) + "\n"


def copyable(page_html):
    """`page_html` with a ``data-copy`` attribute (the code without prompts) on every
    highlighted block that has ``>>>`` prompts."""
    def mark(match):
        source = doctest_source(html.unescape(TAG.sub("", match.group(3))))
        if source is None:
            return match.group(0)
        return f'{match.group(1)} data-copy="{html.escape(source, quote=True)}"' + match.group(0)[len(match.group(1)):]

    return BLOCK.sub(mark, page_html)


def on_page_content(html, page, config, files):
    return copyable(ROLE.sub("", html))
