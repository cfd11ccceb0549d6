#!/usr/bin/env bash
# Installs the Debian 12 packages kvsim needs to build, test and plot. Idempotent: does nothing
# (and needs no network) when everything is already installed. Run as root.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config catch2 libyaml-cpp-dev libboost-dev
      libboost-program-options-dev libeigen3-dev libfmt-dev nlohmann-json3-dev libxxhash-dev
      python3 python3-matplotlib parallel)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kvsim: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
