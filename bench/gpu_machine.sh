#!/usr/bin/env bash
# The CPU build's libraries on a lent GPU machine (docs/GPU.md, "On a lent
# GPU machine"). That machine has nvcc, cuBLAS, NCCL and OpenMPI but neither
# OpenBLAS, oneDNN nor cmocka, and no package registry, and `make cuda-test` needs
# the CPU build beside the CUDA one (the GPU runs are checked against it).
# So the Debian packages travel with the checkout and are unpacked there
# into a scratch folder, never into /.
#
#   bench/gpu_machine.sh fetch        here (Debian, apt): download the .debs into .gpu-debs/
#   eval "$(bench/gpu_machine.sh env)"   there: unpack them into $SCRATCH and print the exports
#
# .gpu-debs/ is git-ignored: name it in the device tool's carry.
# SCRATCH defaults to /tmp/shardlab-gpu-debs.
set -euo pipefail
cd "$(dirname "$0")/.."
debs_dir=.gpu-debs
packages=(libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev libopenblas0 libgfortran5 libquadmath0
          libcmocka0 libcmocka-dev libdnnl2 libdnnl-dev)  # libdnnl*: oneDNN, the CPU's bf16 GEMMs
usage() { echo "usage: bench/gpu_machine.sh fetch | env" >&2; exit 2; }
[ $# -eq 1 ] || usage
case $1 in
fetch)
    command -v apt-get >/dev/null || { echo "gpu_machine.sh fetch: needs apt-get (a Debian/Ubuntu machine)" >&2; exit 1; }
    mkdir -p "$debs_dir"
    rm -f "$debs_dir"/*.deb
    (cd "$debs_dir" && apt-get -q -o APT::Sandbox::User=root download "${packages[@]}")
    echo "gpu_machine.sh: $(ls "$debs_dir"/*.deb | wc -l) packages in $debs_dir/ ($(du -sh "$debs_dir" | cut -f1)); carry it" >&2
    ;;
env)
    compgen -G "$debs_dir/*.deb" >/dev/null ||
        { echo "gpu_machine.sh env: no .debs in $debs_dir/ (run 'bench/gpu_machine.sh fetch' on a Debian machine, then carry $debs_dir)" >&2; exit 1; }
    root=${SCRATCH:-/tmp/shardlab-gpu-debs}
    mkdir -p "$root"
    for d in "$debs_dir"/*.deb; do dpkg -x "$d" "$root"; done
    arch=$(gcc -print-multiarch)
    lib=$root/usr/lib/$arch
    [ -f "$lib/openblas-openmp/libopenblas.so.0" ] ||
        { echo "gpu_machine.sh env: $lib/openblas-openmp/libopenblas.so.0 missing after unpacking" >&2; exit 1; }
    # Debian picks cblas.h and libopenblas.so through update-alternatives,
    # which dpkg -x does not run: name the OpenMP build's folders directly.
    echo "export BLAS_DIR=$lib/openblas-openmp"
    echo "export CPATH=$root/usr/include/$arch/openblas-openmp:$root/usr/include\${CPATH:+:\$CPATH}"
    echo "export LIBRARY_PATH=$lib/openblas-openmp:$lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
    echo "export LD_LIBRARY_PATH=$lib/openblas-openmp:$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    ;;
*) usage ;;
esac
