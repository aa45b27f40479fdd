#!/usr/bin/env bash
# run_config_as_config.sh GPT CKPT_TOOL CONFIG DIR: a checkpoint's run_config, its `key = `
# lines dropped (docs/checkpoint-format.md), is a config file dtrain-gpt takes, and the run it
# starts is the one that wrote the checkpoint: the same loss at its first step.
set -u
gpt=$1 tool=$2 config=$3 dir=$4
first_loss() { grep -Eo 'step 1/[0-9]+ \| loss [0-9.]+' "$1"; }
rm -rf "$dir" && mkdir -p "$dir" || exit 1
"$gpt" --config "$config" --steps 1 --save-dir "$dir/ckpt" > "$dir/first.log" 2>&1 ||
  { cat "$dir/first.log"; echo "FAIL: the run that saves"; exit 1; }
"$tool" inspect "$dir/ckpt/step_00000001.h5" |
  awk '/^  run_config:$/ { on = 1; next } on && /^    / { print substr($0, 5); next } { on = 0 }' |
  grep -v ' = *$' > "$dir/run_config.ini"
[ -s "$dir/run_config.ini" ] || { echo "FAIL: no run_config in the inspection"; exit 1; }
"$gpt" --config "$dir/run_config.ini" > "$dir/second.log" 2>&1 ||
  { cat "$dir/run_config.ini" "$dir/second.log"; echo "FAIL: run_config as --config"; exit 1; }
a=$(first_loss "$dir/first.log") b=$(first_loss "$dir/second.log")
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: '$a' against '$b'"; exit 1; }
echo "ok: $a both times"
