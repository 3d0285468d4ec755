#!/usr/bin/env python3
"""Median wall time of N runs of each startup probe (process start + first use + exit)."""
import statistics, subprocess, sys, time, os
os.chdir(os.path.dirname(os.path.abspath(__file__)))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
for exe in ["none", "ours_regex", "pcre2_dyn", "pcre2_static", "icu_nfc_dyn", "icu_nfc_static",
            "icu_all_dyn", "icu_all_static"]:
    t = []
    for _ in range(N):
        s = time.perf_counter()
        subprocess.run(["./" + exe], stdout=subprocess.DEVNULL, check=True)
        t.append(time.perf_counter() - s)
    print(f"| {exe} | {os.path.getsize(exe) / 1e6:.2f} MB | {statistics.median(t) * 1e3:.2f} ms | {min(t) * 1e3:.2f} ms |")
