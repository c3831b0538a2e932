"""Write docs/assets/own_loop_mi.png by running the first block of docs/guide/own-loop.md.

    python docs/gen_own_loop_figure.py

The block (a plain PyTorch loop recorded with ``DumpWriter``, analysed and drawn) runs as
the page shows it, in a temporary folder, on one PyTorch thread (as tests/test_docs.py
runs it); the figure it writes there, ``my_mi.png``, is copied to
docs/assets/own_loop_mi.png, which the page shows.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guide" / "own-loop.md"
ASSET = ROOT / "docs" / "assets" / "own_loop_mi.png"
FIGURE = "my_mi.png"  # what the block writes


def loop_block(page: str | None = None) -> str:
    """The code of the page's first ``python`` block (the training loop)."""
    text = PAGE.read_text() if page is None else page
    found = re.search(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    if found is None:
        raise ValueError(f"{PAGE.name} has no ```python block")
    return found.group(1)


def main(asset: Path = ASSET) -> Path:
    """Run the block in a temporary folder and copy its figure to `asset`."""
    sys.path.insert(0, str(ROOT))
    import torch

    code = loop_block()
    if FIGURE not in code:
        raise ValueError(f"the first block of {PAGE.name} no longer writes {FIGURE}; update this script")
    torch.set_num_threads(1)
    here = os.getcwd()
    tmp = Path(tempfile.mkdtemp())
    try:
        os.chdir(tmp)
        exec(compile(code, str(PAGE), "exec"), {"__name__": "__main__"})
        asset.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp / FIGURE, asset)
    finally:
        os.chdir(here)
        shutil.rmtree(tmp, ignore_errors=True)
    return asset


if __name__ == "__main__":
    print(main().relative_to(ROOT))
