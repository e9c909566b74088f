"""Run kvfit (a separate tool, never a csa-plan dependency) with its Hugging Face calls answered locally.

``bench_cli.py --kvfit-python PY`` runs ``PY benchmarks/kvfit_local.py ARGS…`` beside csa-plan, so the
two start-up times compare like for like: kvfit's ``urlopen`` is replaced by one that answers
``…/config.json`` with csa-plan's bundled preset (planner/presets/<name>.json, chosen by the model
name's last part, e.g. ``deepseek-ai/DeepSeek-V4-Pro`` -> deepseek-v4-pro.json) and the model-info
API call with one root ``model.safetensors`` sized as the preset's weights; everything else kvfit
does (parsing, planning, printing) is its own. Install kvfit in a throw-away virtualenv:
``python3 -m venv /tmp/kvfit && /tmp/kvfit/bin/pip install kvfit==0.3.0``.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

PRESETS = Path(__file__).resolve().parent.parent / "planner" / "presets"
# The checkpoints' root safetensors bytes as Hugging Face lists them (order of magnitude is what
# matters to kvfit's planning path; the figure is csa-plan's inventory total for the preset).
WEIGHT_BYTES = {"deepseek-v4-pro": 864_704_792_696, "deepseek-v4-flash": 159_609_485_896}


class _Response(io.BytesIO):
    def __init__(self, body: bytes) -> None:
        super().__init__(body)
        self.headers = {"Content-Length": str(len(body))}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _preset_name(url: str) -> str:
    for part in url.split("?")[0].split("/"):
        name = part.lower()
        if (PRESETS / f"{name}.json").is_file():
            return name
    raise SystemExit(f"kvfit_local: no bundled preset answers {url}")


def _urlopen(request, timeout=None):
    url = request.full_url if hasattr(request, "full_url") else str(request)
    name = _preset_name(url)
    if url.split("?")[0].endswith("/config.json"):
        return _Response((PRESETS / f"{name}.json").read_bytes())
    if "/api/models/" in url:
        body = {"id": name, "sha": "0" * 40,
                "siblings": [{"rfilename": "config.json", "size": 2000},
                             {"rfilename": "model.safetensors", "size": WEIGHT_BYTES[name]}]}
        return _Response(json.dumps(body).encode())
    raise SystemExit(f"kvfit_local: no local answer for {url}")


def main() -> None:
    import kvfit.hf

    kvfit.hf.urlopen = _urlopen
    from kvfit.cli import main as kvfit_main

    sys.argv = ["kvfit", *sys.argv[1:]]
    sys.exit(kvfit_main())


if __name__ == "__main__":
    main()
