#!/usr/bin/env bash
# Under mpirun on a host with one GPU: every rank takes GPU 0 (the trainer
# picks the GPU of its local rank) and gets its own NCCL host id, since
# NCCL refuses two ranks of one communicator on one device of one host.
# For correctness tests only: the ranks share the GPU's time.
export NCCL_HOSTID="shardlab-rank-${OMPI_COMM_WORLD_RANK:-0}" NCCL_SOCKET_IFNAME=lo
export OMPI_COMM_WORLD_LOCAL_RANK=0
exec "$@"
