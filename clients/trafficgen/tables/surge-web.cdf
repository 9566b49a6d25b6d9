# Heavy-tailed flow sizes: web-object sizes after the SURGE model.
#
# Source: the file-size model of P. Barford and M. Crovella, "Generating
# representative Web workloads for network and server performance
# evaluation", ACM SIGMETRICS 1998 (the SURGE generator): a lognormal body
# (mu = 9.357, sigma = 1.318, natural log of bytes) and a Pareto tail
# (alpha = 1.1) above k = 133 KB, fitted to Web server file sizes of the
# late 1990s, the era of the ACTS multi-flow study, whose TrafGen
# profile is not published. This table is COMPUTED from those model
# parameters, not measured trace data, and the parameters were taken from
# memory of the paper (no copy of it could be consulted while writing this
# file): check them against the paper before citing numbers from it.
#
# How it was computed: P(X <= x) = Phi((ln x - mu) / sigma) for x < k, and
# 1 - (1 - Phi((ln k - mu) / sigma)) * (k / x)^alpha above (the two pieces
# meet at k, where the body holds 0.9680 of the flows). Twelve points per
# decade from 100 B; the tail is cut at 100 MB (the last point is 1: the
# mass beyond, 2.2e-05, is drawn between the last two points). Median about
# 11.6 KB; mean of the table as drawn about 44,300 bytes (TestSurgeTable).
#
# Format (trafficgen -sizes table:PATH): "size_bytes cumulative_probability"
# per line, sizes increasing, probabilities non-decreasing, last one 1;
# draws interpolate linearly in size between points.
       100 0.000156
       121 0.000269
       147 0.000461
       178 0.000768
       215 0.001245
       261 0.002005
       316 0.003144
       383 0.004848
       464 0.007325
       562 0.010852
       681 0.015785
       825 0.022521
      1000 0.031563
      1212 0.043409
      1468 0.058554
      1778 0.077562
      2154 0.100958
      2610 0.129149
      3162 0.162347
      3831 0.200667
      4642 0.243982
      5623 0.291816
      6813 0.343681
      8254 0.398642
     10000 0.455699
     12115 0.513679
     14678 0.571384
     17783 0.627596
     21544 0.681200
     26102 0.731273
     31623 0.777043
     38312 0.818016
     46416 0.853924
     56234 0.884735
     68129 0.910620
     82540 0.931910
    100000 0.949055
    121153 0.962572
    133000 0.967996
    146780 0.971285
    177828 0.976749
    215443 0.981173
    261016 0.984756
    316228 0.987657
    383119 0.990005
    464159 0.991907
    562341 0.993447
    681292 0.994694
    825404 0.995704
   1000000 0.996521
   1211528 0.997183
   1467799 0.997719
   1778279 0.998153
   2154435 0.998505
   2610157 0.998789
   3162278 0.999020
   3831187 0.999206
   4641589 0.999357
   5623413 0.999479
   6812921 0.999579
   8254042 0.999659
  10000000 0.999724
  12115277 0.999776
  14677993 0.999819
  17782794 0.999853
  21544347 0.999881
  26101572 0.999904
  31622777 0.999922
  38311868 0.999937
  46415888 0.999949
  56234133 0.999959
  68129207 0.999967
  82540419 0.999973
 100000000 1.000000
