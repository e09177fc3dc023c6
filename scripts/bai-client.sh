#!/usr/bin/env bash
# Installs Backend.AI's official client (backend.ai-client 26.9.6: the `backend.ai` CLI and the
# `ai.backend.client` SDK) in a virtual environment of its own, .dev/bai-client, under Python 3.13
# (the client needs it; the project runs on 3.11). tests/compat/test_client_e2e.py drives it
# against a real cluster. Python 3.13 is looked for on PATH, then under pyenv, then as
# SOKOVAN_PYTHON313.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION=26.9.6
VENV=.dev/bai-client
if [ -x "$VENV/bin/backend.ai" ] && "$VENV/bin/python" -c "
import importlib.metadata as m, sys
sys.exit(m.version('backend.ai-client') != '$VERSION')" 2>/dev/null; then
	exit 0
fi
python=""
for candidate in "${SOKOVAN_PYTHON313:-}" python3.13 "$(command -v pyenv >/dev/null 2>&1 && pyenv root)/versions/"3.13*/bin/python3.13 "$HOME"/.pyenv/versions/3.13*/bin/python3.13 /usr/local/bin/python3.13 /usr/bin/python3.13; do
	[ -n "$candidate" ] || continue
	if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' >/dev/null 2>&1; then
		python="$candidate"
		break
	fi
done
if [ -z "$python" ]; then
	echo "scripts/bai-client.sh: Backend.AI's client needs Python 3.13, and none was found" >&2
	echo "(install it, or set SOKOVAN_PYTHON313 to its interpreter)" >&2
	exit 1
fi
echo "installing backend.ai-client==$VERSION under $python in $VENV"
rm -rf "$VENV"
mkdir -p .dev
"$python" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "backend.ai-client==$VERSION"
