#!/usr/bin/env bash
# Installs what is missing, builds kvsim, runs the bundled default scenario and draws its plots.
# Results: results/default/ (summary.json, requests.csv, steps.csv, ...) and results/default/plots/.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$KVSIM_ROOT"
kvsim_build build kvsim
rm -rf results/default
./build/kvsim run scenarios/default.yaml -o results
./build/kvsim plot results/default
echo "kvsim: results in $KVSIM_ROOT/results/default, plots in results/default/plots (open index.html)"
