"""Make data_samples/producers/: small EAGLE-3 drafts written by the producers' own code.

    python3 scripts/make_producer_fixtures.py            # from the repository root
    python3 scripts/make_producer_fixtures.py --venv-root /tmp   # where the two venvs live (default /tmp)

Not run by the test suite. It needs the package registry the first time: it creates (or reuses)
two throwaway venvs, because the producers' pins conflict with each other and with the kit's
environment:

    <venv-root>/venv-sf    torch 2.13.0 (CPU), specforge==0.2.0 (--no-deps), transformers 5.8.1, ...
    <venv-root>/venv-spec  torch 2.13.0 (CPU), speculators==0.9.0 (--no-deps), hs-connectors 0.9.0,
                           transformers<=5.19, ...

Never install them into the kit's own .venv. Time: about 3-5 minutes the first time (mostly pip;
torch installs from the local mirror), about 40 seconds once the venvs exist (the generators take
~10 s and ~15 s; the rest is venv probing).

Then it wipes data_samples/producers/ and runs, each in its producer's venv, the plain scripts in
scripts/producer_fixtures/: make_target.py (the shared tiny target), gen_specforge.py and
gen_speculators.py (one folder per variant plus layouts/). docs/producer-variants.md describes
the output and each producer's forward. Weights and inputs come from fixed seeds; logits are
computed on CPU with the producers' own forward code.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "scripts", "producer_fixtures")
OUT = os.path.join("data_samples", "producers")  # repo-relative: recorded in speculators' config

SF_PKGS = ["transformers==5.8.1", "safetensors", "numpy", "pyyaml", "tqdm", "pydantic", "psutil",
           "triton", "datasets"]  # triton/datasets: imported by specforge's loss and data modules
SPEC_PKGS = ["transformers>=5.0.0,<=5.19.0", "safetensors", "numpy>=2.0.0,<=2.5.4", "pydantic>=2",
             "pydantic-settings", "loguru>=0.7.2,<=0.7.3", "tqdm", "click", "typer", "rich", "psutil",
             "openai>=2", "httpx", "protobuf", "aiohttp", "datasets>=4.0.0,<=5.1.0"]


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def ensure_venv(path, producer_pins, extra):
    py = os.path.join(path, "bin", "python")
    probe = {"venv-sf": "import specforge.algorithms.eagle3.model, specforge.export.to_sglang",
             "venv-spec": "import speculators.models.eagle3.core, speculators.train.checkpointer"}
    name = os.path.basename(path)
    if os.path.exists(py) and subprocess.run([py, "-W", "ignore", "-c", probe[name]],
                                             capture_output=True).returncode == 0:
        return py
    run([sys.executable, "-m", "venv", path])
    pip = [py, "-m", "pip", "install", "-q"]
    run(pip + ["torch==2.13.0"])
    run(pip + ["--no-deps"] + producer_pins)
    run(pip + extra)
    run([py, "-W", "ignore", "-c", probe[name]])
    return py


def versions(py):
    out = subprocess.run([py, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True)
    keep = {"torch", "transformers", "specforge", "speculators", "safetensors", "hs-connectors"}
    return {p["name"]: p["version"] for p in json.loads(out.stdout) if p["name"].lower() in keep}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--venv-root", default="/tmp")
    args = ap.parse_args()
    os.chdir(ROOT)
    sf = ensure_venv(os.path.join(args.venv_root, "venv-sf"), ["specforge==0.2.0"], SF_PKGS)
    spec = ensure_venv(os.path.join(args.venv_root, "venv-spec"),
                       ["speculators==0.9.0", "hs-connectors==0.9.0"], SPEC_PKGS)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    work = os.path.join(args.venv_root, "producer-fixtures-work")
    shutil.rmtree(work, ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false")
    target = os.path.join(OUT, "target")
    run([sf, os.path.join(HERE, "make_target.py"), target], env=env)
    run([sf, os.path.join(HERE, "gen_specforge.py"), OUT, target, os.path.join(work, "sf"), "--layouts"], env=env)
    run([spec, os.path.join(HERE, "gen_speculators.py"), OUT, target, os.path.join(work, "spec"), "--layouts"],
        env=env)
    with open(os.path.join(OUT, "versions.json"), "w") as f:
        json.dump({"specforge venv": versions(sf), "speculators venv": versions(spec)}, f, indent=2)
        f.write("\n")
    run(["du", "-sh", OUT])


if __name__ == "__main__":
    main()
