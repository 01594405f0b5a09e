"""Make data_samples/producers/: small EAGLE-3 drafts written by the producers' own code.

    python3 -m scripts.make_producer_fixtures            # from the repository root: all producers
    python3 -m scripts.make_producer_fixtures --venv-root /tmp   # where the venvs live (default /tmp)
    python3 -m scripts.make_producer_fixtures --only nemo --only modelopt   # just these producers
    python3 -m scripts.make_producer_fixtures --only torchspec --torchspec-git-dir DIR  # see below

Not run by the test suite. It needs the package registry the first time: it creates (or reuses)
one throwaway venv per producer, because the producers' pins conflict with each other and with
the kit's environment:

    <venv-root>/venv-sf        torch 2.13.0 (CPU), specforge==0.2.0 (--no-deps), transformers 5.8.1, ...
    <venv-root>/venv-spec      torch 2.13.0 (CPU), speculators==0.9.0 (--no-deps), hs-connectors 0.9.0,
                               transformers<=5.19, ...
    <venv-root>/venv-nemo      torch 2.13.0 (CPU), nemo-automodel==0.7.0 (--no-deps), transformers 5.18.0,
                               datasets, pillow (imported by nemo_automodel's package __init__ files)
    <venv-root>/venv-modelopt  torch 2.13.0 (CPU), nvidia-modelopt==0.47.0 (--no-deps),
                               transformers 5.14.1 (modelopt's [hf] extra wants <5.15; 5.15+ renamed the
                               decoder layer's past_key_values argument, which breaks its TTT cache)
    <venv-root>/venv-torchspec torch 2.13.0 (CPU), transformers 4.57.1, numba, wandb, datasets<4.3
                               (imported by torchspec's package __init__ files); TorchSpec itself is source only
                               (not on PyPI): its tree is exported from a git dir (--torchspec-git-dir,
                               at TORCHSPEC_COMMIT) or taken from a checkout (--torchspec-src) and put
                               on PYTHONPATH, never installed

Never install them into the kit's own .venv. Time: about 3-5 minutes the first time (mostly pip;
torch installs from the local mirror), about 40 seconds once the venvs exist (the generators take
~10 s and ~15 s; the rest is venv probing).

Without --only it wipes data_samples/producers/ and runs, each in its producer's venv, the plain
scripts in scripts/producer_fixtures/: make_target.py (the shared tiny target), gen_specforge.py
and gen_speculators.py (one folder per variant plus layouts/), and into pending/ (not collected
by tests/test_producers.py: the kit does not model them yet) gen_nemo.py (nemo_* and
target_deepseek_v3/), gen_modelopt.py (modelopt_eagle3/) and gen_torchspec.py
(torchspec_mla_pruned/). With --only it wipes nothing: each generator replaces only its own
folders, target/ is left as it is (it must exist), and versions.json keeps the other producers'
entries. docs/producer-variants.md describes the output and each producer's forward. Weights and
inputs come from fixed seeds; logits are computed on CPU with the producers' own forward code.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "scripts.producer_fixtures"  # its modules run as `python -m` from ROOT, in each producer's venv
OUT = os.path.join("data_samples", "producers")  # repo-relative: recorded in speculators' config
# nemo / modelopt / torchspec fixtures: one level down, out of tests/test_producers.py's reach (it
# collects every direct child of producers/ holding a reference.pt) until the kit models them
PENDING = os.path.join(OUT, "pending")

SF_PKGS = ["transformers==5.8.1", "safetensors", "numpy", "pyyaml", "tqdm", "pydantic", "psutil",
           "triton", "datasets"]  # triton/datasets: imported by specforge's loss and data modules
NEMO_PKGS = ["transformers==5.18.0", "safetensors", "numpy", "pyyaml", "datasets", "pillow"]
MODELOPT_PKGS = ["transformers==5.14.1", "safetensors", "numpy", "packaging", "tqdm", "pyyaml", "omegaconf",
                 "pydantic>=2", "regex", "rich", "scipy", "nvidia-ml-py", "pulp<4.0", "requests"]
TORCHSPEC_PKGS = ["transformers==4.57.1", "huggingface-hub>=0.34,<1.0", "datasets<4.3", "safetensors", "numpy<2.4",
                  "tqdm", "typing_extensions", "numba", "wandb"]  # numba/wandb/datasets: imported by torchspec's packages
TORCHSPEC_COMMIT = "6f21829cd0e333c3b54d9d2706a0b0c8dc10de9d"  # lightseekorg/TorchSpec, version.txt 0.1.0
PRODUCERS = ("specforge", "speculators", "nemo", "modelopt", "torchspec")
SPEC_PKGS = ["transformers>=5.0.0,<=5.19.0", "safetensors", "numpy>=2.0.0,<=2.5.4", "pydantic>=2",
             "pydantic-settings", "loguru>=0.7.2,<=0.7.3", "tqdm", "click", "typer", "rich", "psutil",
             "openai>=2", "httpx", "protobuf", "aiohttp", "datasets>=4.0.0,<=5.1.0"]


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def ensure_venv(path, producer_pins, extra):
    py = os.path.join(path, "bin", "python")
    probe = {"venv-sf": "import specforge.algorithms.eagle3.model, specforge.export.to_sglang",
             "venv-spec": "import speculators.models.eagle3.core, speculators.train.checkpointer",
             "venv-nemo": "import nemo_automodel.components.speculative.eagle.draft_deepseek, "
                          "nemo_automodel.components.checkpoint.checkpointing",
             "venv-modelopt": "import modelopt.torch.speculative.plugins.hf_eagle, modelopt.torch.export",
             "venv-torchspec": "import torch, transformers, safetensors, numba, wandb, datasets"}
    name = os.path.basename(path)
    if os.path.exists(py) and subprocess.run([py, "-W", "ignore", "-c", probe[name]],
                                             capture_output=True).returncode == 0:
        return py
    run([sys.executable, "-m", "venv", path])
    pip = [py, "-m", "pip", "install", "-q"]
    run(pip + ["torch==2.13.0"])
    if producer_pins:
        run(pip + ["--no-deps"] + producer_pins)
    run(pip + extra)
    run([py, "-W", "ignore", "-c", probe[name]])
    return py


def versions(py):
    out = subprocess.run([py, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True)
    keep = {"torch", "transformers", "specforge", "speculators", "safetensors", "hs-connectors",
            "nemo-automodel", "nvidia-modelopt"}
    return {p["name"]: p["version"] for p in json.loads(out.stdout) if p["name"].lower() in keep}


def torchspec_tree(args, work) -> str:
    """The TorchSpec source tree gen_torchspec.py imports from (torchspec/ and tools/)."""
    if args.torchspec_src:
        return os.path.abspath(args.torchspec_src)
    dest = os.path.join(work, "torchspec-src")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    archive = subprocess.run(["git", "--git-dir", args.torchspec_git_dir, "archive", TORCHSPEC_COMMIT,
                              "torchspec", "tools", "version.txt"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    with open(os.path.join(dest, "COMMIT"), "w") as f:
        f.write(TORCHSPEC_COMMIT + "\n")
    return dest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--venv-root", default="/tmp")
    ap.add_argument("--only", action="append", choices=PRODUCERS,
                    help="run just this producer (repeatable); nothing else is wiped or rewritten")
    ap.add_argument("--torchspec-git-dir", help="git dir of lightseekorg/TorchSpec (fetched mirror)")
    ap.add_argument("--torchspec-src", help="a TorchSpec checkout at TORCHSPEC_COMMIT (instead of the git dir)")
    args = ap.parse_args()
    os.chdir(ROOT)
    only = set(args.only or PRODUCERS)
    if "torchspec" in only and not (args.torchspec_src or args.torchspec_git_dir):
        sys.exit("the torchspec fixture (a full run, or --only torchspec) needs --torchspec-git-dir (a git dir of "
                 "github.com/lightseekorg/TorchSpec holding commit " + TORCHSPEC_COMMIT + ") or --torchspec-src; "
                 "nothing was changed")
    work = os.path.join(args.venv_root, "producer-fixtures-work")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false")
    target = os.path.join(OUT, "target")
    vpath = os.path.join(OUT, "versions.json")
    vers = {}
    if args.only:
        if not os.path.isdir(target):
            sys.exit(f"{target} is missing: run without --only first")
        if os.path.exists(vpath):
            with open(vpath) as f:
                vers = json.load(f)
        for p in only:  # only this producer's own scratch space
            shutil.rmtree(os.path.join(work, p), ignore_errors=True)
    else:
        shutil.rmtree(OUT, ignore_errors=True)
        os.makedirs(OUT)
        shutil.rmtree(work, ignore_errors=True)
    ts_src = torchspec_tree(args, work) if "torchspec" in only else None
    venvs = {}
    if "specforge" in only or not args.only:
        venvs["specforge venv"] = ensure_venv(os.path.join(args.venv_root, "venv-sf"), ["specforge==0.2.0"], SF_PKGS)
    if "speculators" in only:
        venvs["speculators venv"] = ensure_venv(os.path.join(args.venv_root, "venv-spec"),
                                                ["speculators==0.9.0", "hs-connectors==0.9.0"], SPEC_PKGS)
    if "nemo" in only:
        venvs["nemo-automodel venv"] = ensure_venv(os.path.join(args.venv_root, "venv-nemo"),
                                                   ["nemo-automodel==0.7.0"], NEMO_PKGS)
    if "modelopt" in only:
        venvs["modelopt venv"] = ensure_venv(os.path.join(args.venv_root, "venv-modelopt"),
                                             ["nvidia-modelopt==0.47.0"], MODELOPT_PKGS)
    if "torchspec" in only:
        venvs["torchspec venv"] = ensure_venv(os.path.join(args.venv_root, "venv-torchspec"), [], TORCHSPEC_PKGS)
    if not args.only:
        run([venvs["specforge venv"], "-m", f"{PKG}.make_target", target], env=env)
    if "specforge" in only:
        run([venvs["specforge venv"], "-m", f"{PKG}.gen_specforge", OUT, target, os.path.join(work, "sf"),
             "--layouts"], env=env)
    if "speculators" in only:
        run([venvs["speculators venv"], "-m", f"{PKG}.gen_speculators", OUT, target,
             os.path.join(work, "spec"), "--layouts"], env=env)
    if "nemo" in only:
        run([venvs["nemo-automodel venv"], "-m", f"{PKG}.gen_nemo", PENDING, target, os.path.join(work, "nemo")],
            env=env)
    if "modelopt" in only:
        run([venvs["modelopt venv"], "-m", f"{PKG}.gen_modelopt", PENDING, target,
             os.path.join(work, "modelopt")], env=env)
    if "torchspec" in only:
        run([venvs["torchspec venv"], "-m", f"{PKG}.gen_torchspec", PENDING, target,
             os.path.join(work, "torchspec"), ts_src],
            env={**env, "PYTHONPATH": os.pathsep.join([os.path.abspath(ts_src), os.path.join(os.path.abspath(ts_src), "tools")])})
    for name, py in venvs.items():
        if name == "specforge venv" and "specforge" not in only:
            continue  # used for make_target only
        vers[name] = versions(py)
        if name == "torchspec venv":
            vers[name]["torchspec (source, git commit)"] = TORCHSPEC_COMMIT
    with open(vpath, "w") as f:
        json.dump(vers, f, indent=2)
        f.write("\n")
    run(["du", "-sh", OUT])


if __name__ == "__main__":
    main()
