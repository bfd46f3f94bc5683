"""Serving the explorers (albert_edu.explorers) as a small web app: one notebook per explorer, rendered by Voila
on 127.0.0.1 with the book's kernel environment.

    albert-edu explore [--port 8866]     # (make explore)
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from albert_edu.tools.manifest import BUILD, ROOT, kernel_env, load_book

EXPLORE_DIR = BUILD / "explore"
EXPLORERS = {"parameters": "parameter_explorer", "masking": "masking_explorer", "layers": "layer_explorer",
             "fill-mask": "fill_mask_explorer"}


def write_notebooks(out_dir: Path = EXPLORE_DIR) -> list[Path]:
    """One small notebook per explorer, for Voila to serve."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, function in EXPLORERS.items():
        cells = [{"cell_type": "code", "execution_count": None, "id": name, "metadata": {}, "outputs": [],
                  "source": f"from albert_edu.explorers import {function}\n\n{function}()"}]
        nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
              "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
        paths.append(out_dir / f"{name}.ipynb")
        paths[-1].write_text(json.dumps(nb, indent=1) + "\n")
    return paths


def serve_command(port: int, out_dir: Path = EXPLORE_DIR) -> list[str]:
    return [sys.executable, "-m", "voila", str(out_dir), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
            "--ServerApp.port_retries=0", "--Voila.tornado_settings={'disable_check_xsrf': True}"]


def serve(port: int) -> int:
    """Write the explorers' notebooks and serve them until interrupted; returns Voila's exit status."""
    write_notebooks()
    print("explorers: " + ", ".join(f"http://127.0.0.1:{port}/voila/render/{n}.ipynb" for n in EXPLORERS))
    env = {**os.environ, **kernel_env(load_book()), "PYTHONPATH": str(ROOT)}
    return subprocess.call(serve_command(port), env=env)
