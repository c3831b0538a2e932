"""MkDocs hook: serve the repository's figures/ folder as the site's figures/.

The experiments write their figures into ``figures/`` at the repository root, where the
README shows them; the documentation links to the same files as ``figures/NAME.png``
(relative to the docs folder) instead of keeping copies.
"""

from pathlib import Path

from mkdocs.structure.files import File

FIGURES = Path(__file__).resolve().parents[1] / "figures"


def on_files(files, config):
    for path in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"figures/{path.name}", abs_src_path=str(path)))
    return files
