# The one-sided Mann-Whitney U test the comparisons with reference tools share (rdma-test
# against perftest, cluster-test against sockperf and iperf3); read into their awk programs.
#
# larger_p(x, nx, y, ny): the p-value that x[1..nx] are stochastically larger than y[1..ny]
# (normal approximation with a continuity correction, ties counted half, as `check`'s
# mann_whitney_p and scipy's mannwhitneyu(method="asymptotic") without the tie correction).
# -1 when either side has fewer than five values: so few have little power, and the caller
# judges on its ratio alone.
function larger_p(x, nx, y, ny,    i, j, u, z) {
  if (nx < 5 || ny < 5) return -1
  u = 0
  for (i = 1; i <= nx; i++) for (j = 1; j <= ny; j++) u += (x[i] > y[j]) ? 1 : (x[i] == y[j]) ? 0.5 : 0
  z = (u - nx * ny / 2 - 0.5) / sqrt(nx * ny * (nx + ny + 1) / 12)
  return upper_tail(z)
}
# P(Z > z) for a standard normal (Abramowitz and Stegun 7.1.26, error below 1.5e-7).
function upper_tail(z,    a, t, q) {
  a = (z < 0 ? -z : z) / sqrt(2); t = 1 / (1 + 0.3275911 * a)
  q = 0.5 * t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) * exp(-a * a)
  return z < 0 ? 1 - q : q
}
