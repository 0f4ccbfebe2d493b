#!/usr/bin/env bash
# Download AISHELL-1 (openslr resource 33, data_aishell.tgz, about 15 GB) into DIR and
# extract it, unpacking the per-speaker archives in data_aishell/wav/ as well:
#   DIR/data_aishell/wav/{train,dev,test}/<speaker>/<utt>.wav
#   DIR/data_aishell/transcript/aishell_transcript_v0.8.txt
# An interrupted download resumes (wget -c); a finished extraction (marked by
# DIR/data_aishell/.complete) is skipped.
# Usage: local/download_and_untar.sh DIR [URL_BASE]   (default https://www.openslr.org/resources/33)
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 DIR [URL_BASE]" >&2; exit 1
fi
dir=$1
url=${2:-https://www.openslr.org/resources/33}
part=data_aishell

if [ -f "$dir/$part/.complete" ]; then
  echo "$0: $dir/$part already extracted, skipped" >&2; exit 0
fi
mkdir -p "$dir"
echo "$0: downloading $url/$part.tgz -> $dir" >&2
wget -c --tries=3 -O "$dir/$part.tgz" "$url/$part.tgz"
echo "$0: extracting $dir/$part.tgz" >&2
tar -xzf "$dir/$part.tgz" -C "$dir"
shopt -s nullglob
for archive in "$dir/$part/wav/"*.tar.gz; do
  tar -xzf "$archive" -C "$dir/$part/wav"
  rm "$archive"
done
touch "$dir/$part/.complete"
echo "$0: AISHELL-1 is in $dir/$part (you may delete $dir/$part.tgz)" >&2
