#!/usr/bin/env bash
# help_defaults.sh TRAIN_GPT | --text FILE: `train_gpt --help` shows every flag's default (--text: a help text
# from FILE, for the negative control in test/train/cli.cmake). Each entry (a line that starts with
# "  --", and the indented lines under it) must say "default", except --help itself and a second form of a
# flag already shown (--resume auto). The list of Megatron-LM's spellings at the end is not an entry. Prints the entries that do not; exit 1 when there is any.
set -u
if [ "$1" = "--text" ]; then help=$(cat "$2")
else help=$("$1" --help) || { echo "FAIL: --help exited non-zero"; exit 1; }; fi
missing=$(awk '
  function done_entry() { if (entry != "" && entry !~ /default/ && entry !~ /^  --help/ && entry !~ /^  --resume auto/) print entry }
  /^Megatron-LM spellings/ { done_entry(); entry = ""; exit }
  /^  --/ { done_entry(); entry = $0; next }
  /^      / && entry != "" { entry = entry " " $0; next }
  { done_entry(); entry = "" }
  END { done_entry() }' <<< "$help" | sed -E 's/  +/ /g' | cut -c1-100)
n=$(grep -c '^  --' <<< "$help")
if [ -n "$missing" ]; then echo "FAIL: --help entries without their default:"; echo "$missing"; exit 1; fi
echo "ok: all $n entries of --help give their default"
