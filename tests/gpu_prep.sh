#!/usr/bin/env bash
# `make gpu-prep`: writes the one folder (default .gpu/, git-ignored) that a lent GPU machine needs beyond the
# working tree, so that the one call, tests/gpu_check.sh (its bench, tests/bench_gpu.sh, included), runs there with
# nothing else:
#   kjv/       the KJV shards and tokenizer (data/prepare.py kjv; the machine has no bible-kjv package)
#   doctest/   doctest.h (the GPU machine has no doctest)
#   cudnn-frontend/  the cuDNN frontend's headers for the USE_CUDNN build (.ci/deps fetches them where nvcc is)
#   SOURCE, SOURCES.sha256   the commit and a checksum of every file of the working tree as it was prepared
#                            (the GPU machine may have no .git: the scripts say whether the tree still matches);
#                            in a tree without its repository, every file that .gitignore does not ignore
#   MANIFEST.sha256          every file above, checked by the scripts before they build
# The folder is written whole under a temporary name and renamed, and the working tree plus the folder must stay
# under the device call's 64 MiB. Usage: bash tests/gpu_prep.sh [DIR]
set -eu
cd "$(dirname "$0")/.."
dest=${1:-.gpu}
DOCTEST=${DOCTEST:-/usr/include/doctest}
for f in data/kjv/kjv_train.bin data/kjv/kjv_val.bin data/kjv/kjv_tokenizer.bin; do
    [ -f "$f" ] || { echo "error: $f is missing (make data)" >&2; exit 1; }
done
[ -f "$DOCTEST/doctest.h" ] || { echo "error: no doctest.h in $DOCTEST (Debian: apt-get install doctest-dev)" >&2; exit 1; }
tmp="$dest.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp/kjv" "$tmp/doctest"
cp data/kjv/kjv_train.bin data/kjv/kjv_val.bin data/kjv/kjv_tokenizer.bin "$tmp/kjv/"
cp "$DOCTEST/doctest.h" "$tmp/doctest/"
if [ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]; then
    cp -r .deps/cudnn-frontend "$tmp/cudnn-frontend"
else
    echo "note: no cuDNN frontend in .deps/ (nvcc missing here?): the GPU check will skip the cuDNN attention"
fi
# the files that travel with a device call: tracked ones and untracked ones that git does not ignore. A tree without
# its repository (a tarball, git archive) is listed as a fresh clone's would be: every file .gitignore does not
# ignore, by git with an empty repository of its own
command -v git > /dev/null || { echo "error: gpu-prep lists the tree's files as git does (.gitignore), and git is" \
    "not installed: apt-get install git (make gpu-prep's .ci/deps installs it)" >&2; exit 1; }
if git rev-parse --git-dir > /dev/null 2>&1; then
    dirty=$( [ -n "$(git status --porcelain --untracked-files=no)" ] && echo ", with uncommitted changes" || true)
    echo "commit $(git rev-parse --short=12 HEAD)$dirty, prepared $(date -u +%Y-%m-%dT%H:%MZ)" > "$tmp/SOURCE"
    tree_files() { git ls-files -z --cached --others --exclude-standard; }
else
    echo "no git repository (every file .gitignore does not ignore), prepared $(date -u +%Y-%m-%dT%H:%MZ)" > "$tmp/SOURCE"
    mkdir "$tmp.git" && git init -q --bare "$tmp.git"
    trap 'rm -rf "$tmp" "$tmp.git"' EXIT
    tree_files() { git --git-dir="$tmp.git" --work-tree=. ls-files -z --others --exclude-standard; }
fi
tree_files | xargs -0 -r sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' _ | xargs -0 -r sha256sum > "$tmp/SOURCES.sha256"
[ -s "$tmp/SOURCES.sha256" ] || { echo "error: git lists no files of this tree" >&2; exit 1; }
tree_bytes=$(tree_files | xargs -0 -r du -cb 2> /dev/null | tail -n 1 | cut -f1)
rm -rf "$tmp.git"
(cd "$tmp" && find . -type f ! -name MANIFEST.sha256 | sort | xargs sha256sum > MANIFEST.sha256)
prep_bytes=$(du -sb "$tmp" | cut -f1)
limit=$((64 << 20))
if [ $((prep_bytes + tree_bytes)) -ge $limit ]; then
    echo "error: the working tree ($((tree_bytes >> 20)) MiB) and $dest ($((prep_bytes >> 20)) MiB) exceed a device call's 64 MiB" >&2
    exit 1
fi
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "wrote $dest/: $(awk -v b="$prep_bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB (working tree" \
    "$(awk -v b="$tree_bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB); $(head -n 1 "$dest/SOURCE")"
echo "on the GPU machine, one call: run(command=\"bash tests/gpu_check.sh\", carry=[\"$dest\"], timeout_s=590)"
