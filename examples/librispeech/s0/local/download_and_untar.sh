#!/usr/bin/env bash
# Download LibriSpeech subsets (openslr resource 12, <subset>.tar.gz) into DIR and extract
# them; every tarball unpacks into DIR/LibriSpeech/<subset>/<speaker>/<chapter>/.
# An interrupted download resumes (wget -c); a finished subset (marked by
# DIR/LibriSpeech/<subset>/.complete) is skipped.
# Usage: local/download_and_untar.sh DIR URL_BASE SUBSET...
#   e.g. local/download_and_untar.sh /data/openslr/12 https://www.openslr.org/resources/12 dev-clean test-clean
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 DIR URL_BASE SUBSET..." >&2; exit 1
fi
dir=$1
url=$2
shift 2
mkdir -p "$dir"
for part in "$@"; do
  case $part in
    train-clean-100|train-clean-360|train-other-500|dev-clean|dev-other|test-clean|test-other) ;;
    *) echo "$0: unknown LibriSpeech subset '$part'" >&2; exit 1 ;;
  esac
  if [ -f "$dir/LibriSpeech/$part/.complete" ]; then
    echo "$0: $dir/LibriSpeech/$part already extracted, skipped" >&2; continue
  fi
  echo "$0: downloading $url/$part.tar.gz -> $dir" >&2
  wget -c --tries=3 -O "$dir/$part.tar.gz" "$url/$part.tar.gz"
  echo "$0: extracting $dir/$part.tar.gz" >&2
  tar -xzf "$dir/$part.tar.gz" -C "$dir"
  touch "$dir/LibriSpeech/$part/.complete"
done
