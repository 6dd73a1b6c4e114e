"""Write requirements.lock and requirements-dev.lock: the exact versions pip resolves for cardflow.

    python tools/write_lock.py            # `make lock`: newest versions pyproject.toml allows
    python tools/write_lock.py --keep     # only add what is missing, keeping the versions locked now

pip resolves `.[gpu,tracing]` (runtime; what `make install`, the Dockerfile and CI install) and
`.[dev,gpu,tracing]` (adds the test tools; `make install-dev`) without installing anything
(`pip install --dry-run --report`), with the pip configuration of this machine (its index).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKS = {"requirements.lock": ".[gpu,tracing]", "requirements-dev.lock": ".[dev,gpu,tracing]"}
HEADER = (
    "# Exact versions of cardflow's Python dependencies for `{extras}`, written by tools/write_lock.py\n"
    "# (`make lock`). make, the Dockerfile and CI install this file, then the project with --no-deps.\n"
)


def resolve(target: str, constraints: Path | None) -> list[tuple[str, str]]:
    """(name, version) of everything pip would install for `target`, cardflow itself left out."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                   "--report", str(report), target]  # fmt: skip
        if constraints is not None:
            command += ["--constraint", str(constraints)]
        subprocess.run(command, cwd=ROOT, check=True)
        installs = json.loads(report.read_text())["install"]
    found = {(item["metadata"]["name"], item["metadata"]["version"]) for item in installs}
    return sorted(((n, v) for n, v in found if n.lower() != "cardflow"), key=lambda pin: pin[0].lower())


def main(keep: bool) -> None:
    for file, target in LOCKS.items():
        path = ROOT / file
        constraints = path if keep and path.exists() else None
        pins = resolve(target, constraints)
        path.write_text(HEADER.format(extras=target) + "".join(f"{name}=={version}\n" for name, version in pins))
        print(f"{file}: {len(pins)} packages")


if __name__ == "__main__":
    main(keep="--keep" in sys.argv[1:])
