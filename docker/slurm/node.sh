#!/bin/sh
# Start one Slurm daemon in this container, after munge: `ctl` (slurmctld) or
# `node` (slurmd). The cluster directory (mounted at the same path as on the
# host) holds slurm.conf and the cluster's munge key.
#   satbed-slurm-node ctl|node CLUSTER_DIR
set -eu
role=$1 dir=$2
install -o munge -g munge -m 0400 "$dir/munge.key" /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
runuser -u munge -- munged --force
cp "$dir/slurm.conf" /etc/slurm/slurm.conf
case $role in
ctl)  mkdir -p /var/spool/slurmctld; exec slurmctld -D ;;
node) mkdir -p /var/spool/slurmd; exec slurmd -D -N "$(hostname)" ;;
*)    echo "usage: satbed-slurm-node ctl|node CLUSTER_DIR" >&2; exit 2 ;;
esac
