#!/usr/bin/env bash
# The wheelhouse scripts/gpu_check.py installs from on the device machine (issue 42; docs/gpu.md), which has
# a CUDA torch but no internet. Run here, on the CPU machine, before the device call:
#
#   bash scripts/gpu_wheelhouse.sh          # fills .gpu-wheels/ (git-ignored) afresh; carry: [".gpu-wheels"]
#   bash scripts/gpu_wheelhouse.sh --list   # what it would fetch and why; downloads nothing
#
# What goes in: posenc's dependencies (pyproject.toml's, and its test extra's), followed through their own
# requirements as installed in this environment, less everything the device already has (DEVICE_HAS below,
# from the device tool's KINDS.md: torch, triton, numpy, pandas, transformers, pytest, ...; their own needs
# are theirs), at the versions this environment resolved, as wheels for the device's Python (3.12, x86-64
# manylinux), each downloaded with --no-deps. A release published as a source archive alone
# (antlr4-python3-runtime 4.9.3, hydra-core's parser runtime) is built into a wheel here, and must come out
# pure Python. Plus, in .gpu-wheels/build/, the setuptools that pyproject.toml's build-system asks for: the
# device builds posenc's own wheel from the working tree it was sent, so a fix is never checked against a
# stale wheel. Left out on purpose: the tracking extra's mlflow-skinny and wandb (tens of MiB with their
# needs, against the device tool's 64 MiB for the whole working tree; tests/running/test_tracking.py skips without
# them), and the test extra's ruff (10 MiB; a linter for .ci/run, which no device step runs).
#
# The wheelhouse must fit the device tool's carry limit together with the working tree: the script prints
# both and fails over LIMIT_MIB.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=.gpu-wheels
LIST_ONLY=0
for arg in "$@"; do
    case "$arg" in
        --list) LIST_ONLY=1 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) echo "usage: bash scripts/gpu_wheelhouse.sh [--list]" >&2; exit 2 ;;
    esac
done
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
DEVICE_PYTHON=3.12
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
           manylinux1_x86_64)
LIMIT_MIB=60  # of the device tool's 64 MiB (working tree + carried paths), a little kept for what grows
# The Python packages of the device image 'cuda' (nvidia-h100-x1, nvidia-h200), as KINDS.md lists them (read
# 2026-11-17). Carry one only for another version.
DEVICE_HAS="
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning
pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers
toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
xxhash yarl zipp"
LEAVE_OUT="mlflow-skinny wandb ruff"

# "run NAME==VERSION" for each wheel to fetch and "build SPEC" for the build tools (why, on stderr).
resolve() {
    DEVICE_HAS="$DEVICE_HAS" LEAVE_OUT="$LEAVE_OUT" DEVICE_PYTHON="$DEVICE_PYTHON" "$PY" - <<'PYTHON'
import importlib.metadata as metadata
import os
import re
import sys
import tomllib

try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:  # pip's own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


device_has = {norm(n) for n in os.environ["DEVICE_HAS"].split()}
leave_out = {norm(n) for n in os.environ["LEAVE_OUT"].split()}
py = os.environ["DEVICE_PYTHON"]
marker_env = {"python_version": py, "python_full_version": py + ".3", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
              "implementation_name": "cpython", "platform_python_implementation": "CPython"}
project = tomllib.load(open("pyproject.toml", "rb"))
me = norm(project["project"]["name"])
queue = [(r, "posenc") for r in project["project"]["dependencies"]]
queue += [(r, "posenc[test]") for r in project["project"]["optional-dependencies"]["test"]]
needed, seen, problems = {}, set(), []
while queue:
    text, why = queue.pop(0)
    req = Requirement(text)
    if req.marker and not req.marker.evaluate({**marker_env, "extra": ""}):
        continue
    name = norm(req.name)
    if name == me:  # posenc[tracking] inside the test extra: follow the extras named
        for extra in req.extras:
            queue += [(r, f"posenc[{extra}]") for r in project["project"]["optional-dependencies"][extra]]
        continue
    if name in seen:
        continue
    seen.add(name)
    if name in device_has:
        print(f"device {name}  (on the device; needed by {why})", file=sys.stderr)
        continue
    if name in leave_out:
        print(f"leave  {name}  (left out; needed by {why})", file=sys.stderr)
        continue
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        problems.append(f"{req.name} (needed by {why}) is not installed here: install posenc[test] first")
        continue
    if req.specifier and not req.specifier.contains(version, prereleases=True):
        problems.append(f"{req.name} {version} here does not satisfy {req} (needed by {why})")
    needed[name] = version
    print(f"run    {name}=={version}  (needed by {why})", file=sys.stderr)
    queue += [(r, name) for r in metadata.requires(req.name) or []]
for name, version in needed.items():
    print(f"run {name}=={version}")
for text in project["build-system"]["requires"]:
    req = Requirement(text)
    try:
        version = metadata.version(req.name)
        spec = f"{norm(req.name)}=={version}" if req.specifier.contains(version) else text
    except metadata.PackageNotFoundError:
        spec = text
    print(f"build {spec}")
    print(f"build  {spec}  (pyproject.toml's build-system: posenc's wheel is built on the device)",
          file=sys.stderr)
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
PYTHON
}

PLAN=$(resolve)
if [ "$LIST_ONLY" = 1 ]; then
    echo "$PLAN"
    exit 0
fi

rm -rf "$DIR"
mkdir -p "$DIR/build"
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
while read -r kind spec; do
    dest=$DIR
    [ "$kind" = build ] && dest=$DIR/build
    if ! "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$DEVICE_PYTHON" \
            --implementation cp "${platform_args[@]}" -d "$dest" "$spec"; then
        echo "no wheel of $spec for the device: building one here (it must be pure Python)" >&2
        "$PY" -m pip wheel -q --no-deps -w "$dest" "$spec"
    fi
done <<< "$PLAN"

status=0
for wheel in "$DIR"/*.whl "$DIR"/build/*.whl; do
    tag=${wheel%.whl}
    case "$tag" in
        *-none-any|*-cp312-*manylinux*|*-abi3-*manylinux*) ;;
        *) echo "error: $wheel is not for the device (pure Python or cp312 manylinux x86-64)" >&2; status=1 ;;
    esac
done
dupes=$(for wheel in "$DIR"/*.whl; do basename "$wheel" | cut -d- -f1 | tr 'A-Z_.' 'a-z--'; done \
        | sort | uniq -d)
if [ -n "$dupes" ]; then
    echo "error: two versions of $dupes would stop the whole install" >&2
    status=1
fi

wheel_bytes=$(du -sb "$DIR" | cut -f1)
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } \
              | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
echo "$DIR: $(ls "$DIR"/*.whl "$DIR"/build/*.whl | wc -l) wheels, $(mib "$wheel_bytes") MiB; working tree" \
     "$(mib "$tree_bytes") MiB; together $(mib $((wheel_bytes + tree_bytes))) MiB of the device tool's 64"
if [ $((wheel_bytes + tree_bytes)) -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "error: over $LIMIT_MIB MiB: the device call would be refused" >&2
    status=1
fi
ls -1 "$DIR"/*.whl "$DIR"/build/*.whl
exit $status
