#!/bin/sh
# Runs the static-job example as torchrun would: WORLD_SIZE workers on one
# machine, each with its RANK, the store on a free local port.
#   run.sh PROGRAM [WORLD_SIZE]
set -eu
bin=$1
n=${2:-3}
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
FERRY_STORE=127.0.0.1:$port
FERRY_SECRET=example-secret
FERRY_JOB=c-static-job-$$
export FERRY_STORE FERRY_SECRET FERRY_JOB
pids=""
r=0
while [ "$r" -lt "$n" ]; do
  WORLD_SIZE=$n RANK=$r "$bin" &
  pids="$pids $!"
  r=$((r + 1))
done
rc=0
for p in $pids; do
  wait "$p" || rc=1
done
exit $rc
