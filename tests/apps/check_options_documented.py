"""Every option that `dtrain-gpt --help` lists has a row in docs/dtrain-gpt.md.

usage: check_options_documented.py DTRAIN_GPT DOCS_MD
"""
import re
import subprocess
import sys

help_text = subprocess.run([sys.argv[1], "--help"], check=True, capture_output=True, text=True).stdout
options = re.findall(r"^  (?:-\w \[ )?(--[a-z0-9-]+)", help_text, re.MULTILINE)
with open(sys.argv[2], encoding="utf-8") as f:
    docs = f.read()
# `--name` as a whole word: `--loss-scale` must not be found inside `--loss-scale-window`
missing = [o for o in options if not re.search(f"`{re.escape(o)}(?![a-z0-9-])", docs)]
print(f"{len(options)} options in --help, {len(missing)} missing from {sys.argv[2]}: {missing}")
sys.exit(1 if missing or len(options) < 40 else 0)
