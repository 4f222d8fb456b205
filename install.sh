#!/usr/bin/env bash
# Installs duet and everything its tests need into .venv/ at the repository root.
#   - Debian packages (speech synthesisers and recordings for the offline corpus, sox/ffmpeg): installed with
#     apt-get when running as root, otherwise listed for you to install.
#   - torch 2.13.0 (CPU) first, then duet in editable mode with its extras.
set -euo pipefail
cd "$(dirname "$0")"

DEBIAN_PACKAGES=(festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts espeak-ng
                 asterisk-core-sounds-en asterisk-core-sounds-en-g722 asterisk-core-sounds-es
                 asterisk-core-sounds-es-g722 asterisk-core-sounds-fr asterisk-core-sounds-fr-g722
                 pocketsphinx-testdata fortunes fortunes-min fortunes-es fortunes-br wamerican sox ffmpeg curl
                 flite sword-comm-tdavid sword-text-web sword-text-sparv wordnet-base r-cran-janeaustenr
                 chromium)  # chromium: headless browser tests of the web pages

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "install.sh: installing Debian packages: ${missing[*]}"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    else
        echo "install.sh: please install these Debian packages first: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first and alone: 2.13.0 resolves to the CPU build on this machine; anything looser could pull a CUDA build.
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[eval,dev]"
echo "install.sh: done; try .venv/bin/duet --help"
