#!/usr/bin/env bash
# Makes vcluster host i drop packets at random, both ways, with nftables (this kernel has no
# netem): every packet host i receives or sends is dropped with probability PERMILLE / 1000.
# With PEER, only its packets to and from host PEER (one lossy link, no lossy node).
#   lossy.sh 3 10        host 3 drops 1% of everything
#   lossy.sh 0 5 2       the link between hosts 0 and 2 drops 0.5% each way
# Undo with `ip netns exec ${PREFIX}h$i nft delete table inet morphbench_loss` or down.sh.
set -euo pipefail
HOST=${1:?usage: lossy.sh HOST PERMILLE [PEER]}; PERMILLE=${2:?usage: lossy.sh HOST PERMILLE [PEER]}
PEER=${3:-}
PREFIX=${VCLUSTER_PREFIX:-mb}
NS=${PREFIX}h$HOST
in_match="" out_match=""
if [ -n "$PEER" ]; then
  in_match="ip saddr 198.18.0.$((PEER + 1))"
  out_match="ip daddr 198.18.0.$((PEER + 1))"
fi
ip netns exec "$NS" nft -f - <<NFT
table inet morphbench_loss {
  chain input { type filter hook input priority 0; policy accept;
    $in_match numgen random mod 1000 < $PERMILLE drop
  }
  chain output { type filter hook output priority 0; policy accept;
    $out_match numgen random mod 1000 < $PERMILLE drop
  }
}
NFT
echo "vcluster: host $HOST drops $PERMILLE/1000 of its packets${PEER:+ to and from host $PEER}, both ways"
