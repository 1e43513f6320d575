#!/usr/bin/env bash
# bad_inputs.sh TRAIN_GPT PREPARE_DATA MPIEXEC FIXTURE_DIR CASE: one row of the bad-input table.
#   CASE "setup" builds the fixture (token shards, a valid checkpoint directory after 2 steps, and the same
#   fresh model as a Hugging Face directory, hf/: model.safetensors + config.json).
#   Any other CASE copies what it breaks into a temporary directory, breaks it, and runs the trainer through
#   test/expect_error.sh: non-zero exit within 60 s (no rank hangs) and a message matching the case's regex.
# docs/bad_inputs.md lists every case with the message it prints (test/bad_inputs_table.sh makes it).
set -uo pipefail
train="$1"; prep="$2"; mpirun="$3 --oversubscribe --bind-to none"; fix="$4"; case="$5"
here="$(cd "$(dirname "$0")" && pwd)"
T="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --val-batches 0 --steps 4 --val none"

if [ "$case" = setup ]; then
  set -e
  rm -rf "$fix"; mkdir -p "$fix"
  cat "$here/expect_error.sh" "$here/test_resume.sh" "$here/test_crash_save.sh" > "$fix/text.txt"
  "$prep" --out-dir "$fix" "$fix/text.txt" > /dev/null
  $mpirun -np 1 "$train" $T --train "$fix/train.bin" --checkpoint-dir "$fix/ck" --save-every 2 --exit-interval 2 > "$fix/setup.txt"
  test "$(cat "$fix/ck/latest")" = step_00000002
  $mpirun -np 1 "$train" $T --train "$fix/train.bin" --steps 0 --save "$fix/hf/" > "$fix/setup_hf.txt"
  test -f "$fix/hf/model.safetensors" && test -f "$fix/hf/config.json"
  echo "fixture ready: $fix"
  exit 0
fi

w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cp "$fix/train.bin" "$w/train.bin"; cp -r "$fix/ck" "$w/ck"
model="$w/ck/step_00000002/model.bin"; state="$w/ck/step_00000002/state.bin"
cp "$model" "$w/model.bin"; cp "$fix/text.txt" "$w/text.txt"
cp -r "$fix/hf" "$w/hf"
# put FILE OFFSET STRUCT-FORMAT VALUE: overwrite bytes in place (little-endian)
put() { python3 -c "import struct,sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); f.write(struct.pack(sys.argv[3], int(sys.argv[4])))" "$@"; }
cut_to() { python3 -c "import sys; p=sys.argv[1]; d=open(p,'rb').read(); open(p,'wb').write(d[:int(sys.argv[2])] if int(sys.argv[2])>=0 else d[:int(sys.argv[2])])" "$@"; }
append() { printf '\0\0\0\0' | head -c "$2" >> "$1"; }
size() { stat -c %s "$1"; }
# tokenizer FILE MAGIC: a tokenizer file of the 256 bytes, "ab" and an end-of-text token (258 tokens).
tokenizer() { python3 -c "import struct,sys; t=[bytes([b]) for b in range(256)]+[b'ab',b'<|endoftext|>']
open(sys.argv[1],'wb').write(struct.pack('<256i',int(sys.argv[2]),2,len(t),len(t)-1,*[0]*252)+b''.join(bytes([len(x)])+x for x in t))" "$@"; }
# eval_file FILE CUT: an eval file of two examples (4 completions of 2 tokens each), less its last CUT bytes.
eval_file() { python3 -c "import struct,sys; ex=lambda i: [65535,40,i,1,4,2,5,6]+[2,7,8]*4
d=struct.pack('<256i',20240522,1,2,40,*[0]*252)+struct.pack('<40H',*(ex(0)+ex(1))); open(sys.argv[1],'wb').write(d[:len(d)-int(sys.argv[2])])" "$@"; }
# st_edit FILE CODE: rewrite the JSON header h (a dict) of a safetensors file by the Python statements CODE; the
# byte buffer b after it stays (CODE may change it too), the 8-byte header length follows the new header.
st_edit() { python3 -c "import json,struct,sys; p=sys.argv[1]; d=open(p,'rb').read(); n=struct.unpack('<Q',d[:8])[0]; h=json.loads(d[8:8+n]); b=d[8+n:]
exec(sys.argv[2]); t=json.dumps(h).encode(); open(p,'wb').write(struct.pack('<Q',len(t))+t+b)" "$@"; }
# js_edit FILE CODE: the same for a JSON file (config.json) as the dict h.
js_edit() { python3 -c "import json,sys; p=sys.argv[1]; h=json.load(open(p)); exec(sys.argv[2]); json.dump(h,open(p,'w'))" "$@"; }
# hf_tokenizer DIR MERGE: Hugging Face tokenizer files of the 256 bytes and <|endoftext|> (257 tokens: the model's
# vocabulary), whose merges.txt holds the one line MERGE.
hf_tokenizer() { mkdir -p "$1"; python3 -c "import json,sys
keep=list(range(33,127))+list(range(161,173))+list(range(174,256)); cp={}; k=256
for b in range(256):
    cp[b]=b if b in keep else k; k+=b not in keep
v={chr(cp[b]):b for b in range(256)}; v['<|endoftext|>']=256
json.dump(v,open(sys.argv[1]+'/vocab.json','w')); open(sys.argv[1]+'/merges.txt','w').write('#version: 0.2\n'+sys.argv[2]+'\n')" "$@"; }
# Every case exits 1 (a refusal) or 2 (a bad flag), and no rank is aborted (expect_error.sh --exit).
run1() { exec bash "$here/expect_error.sh" --exit '1|2' "$1" $mpirun -np 1 "$train" $T "${@:2}"; }
# run2 REGEX FLAGS...: on 2 ranks, and refused before the first step (the paths and flags checked at start).
run2() { exec bash "$here/expect_error.sh" --before-first-step --exit '1|2' "$1" $mpirun -np 2 "$train" $T "${@:2}"; }
init() { run1 "$1" --train "$w/train.bin" --init "$w/model.bin"; }
# capped REGEX FLAGS...: run1 with the address space capped at 4 GB (an allocation beyond it cannot succeed).
capped() { ulimit -v 4000000; run1 "$@"; }
init_hf() { run1 "$1" --train "$w/train.bin" --init "$w/hf"; }
shard() { run1 "$1" --train "$w/train.bin"; }
resume() { run1 "$1" --train "$w/train.bin" --resume "$w/ck" "${@:2}"; }

case "$case" in
  # ---- llm.c model checkpoint (--init; the same reader loads DIR/step_N/model.bin on --resume)
  ckpt_truncated_header) cut_to "$w/model.bin" 100; init "checkpoint .*model.bin is truncated: expected at least a header of 1024 bytes, the file has 100" ;;
  ckpt_truncated_params) cut_to "$w/model.bin" -4; init "checkpoint .*model.bin has [0-9]+ bytes, expected [0-9]+ .*truncated" ;;
  ckpt_trailing_bytes) append "$w/model.bin" 4; init "checkpoint .*model.bin has [0-9]+ bytes, expected [0-9]+ .*oversized" ;;
  ckpt_wrong_magic) put "$w/model.bin" 0 '<i' 12345; init "checkpoint .*model.bin has magic 12345, expected 20240326" ;;
  ckpt_wrong_version) put "$w/model.bin" 4 '<i' 4; init "checkpoint .*model.bin has version 4, expected 3 \(fp32\) or 5 \(bf16\)" ;;
  ckpt_oversized_hidden) put "$w/model.bin" 24 '<i' 1073741824; init "checkpoint .*model.bin has an invalid model configuration: model too large" ;;
  ckpt_negative_hidden) put "$w/model.bin" 24 '<i' -32; init "invalid model configuration: hidden size \(C\) must be positive, got -32" ;;
  ckpt_heads_not_dividing) put "$w/model.bin" 20 '<i' 5; init "invalid model configuration: hidden 32 is not divisible by 5 heads" ;;
  ckpt_padded_vocab_small) put "$w/model.bin" 28 '<i' 100; init "padded vocabulary 100 is smaller than the vocabulary 257" ;;
  # ---- Hugging Face GPT-2 (--init DIR: model.safetensors + config.json; model/safetensors.cu, model/hf_gpt2.cu)
  hf_header_past_end) put "$w/hf/model.safetensors" 0 '<Q' 1000000000; init_hf "safetensors file .*hf/model.safetensors: the header length 1000000000 runs past the end of the [0-9]+-byte file" ;;
  hf_header_not_json) put "$w/hf/model.safetensors" 8 '<B' 65; init_hf "safetensors file .*hf/model.safetensors: the header is not valid JSON" ;;
  hf_offsets_overlap) st_edit "$w/hf/model.safetensors" "h['transformer.h.0.ln_2.weight']['data_offsets']=h['transformer.h.0.ln_1.weight']['data_offsets']"; init_hf "tensors 'transformer.h.0.ln_1.weight' and 'transformer.h.0.ln_2.weight' overlap" ;;
  hf_offset_out_of_range) st_edit "$w/hf/model.safetensors" "o=h['transformer.ln_f.bias']['data_offsets']; o[1]+=400; o[0]+=400"; init_hf "tensor 'transformer.ln_f.bias' has data_offsets \[[0-9]+, [0-9]+\] outside the [0-9]+-byte buffer" ;;
  hf_bytes_unclaimed) st_edit "$w/hf/model.safetensors" "b+=bytes(16)"; init_hf "the last 16 bytes of the buffer belong to no tensor" ;;
  hf_unknown_dtype) st_edit "$w/hf/model.safetensors" "h['transformer.wpe.weight']['dtype']='F33'"; init_hf "tensor 'transformer.wpe.weight' has the unknown dtype 'F33'" ;;
  hf_integer_dtype) st_edit "$w/hf/model.safetensors" "h['transformer.wpe.weight']['dtype']='I32'"; init_hf "tensor 'transformer.wpe.weight' is stored as I32, expected F32, F16 or BF16" ;;
  hf_bytes_not_shape) st_edit "$w/hf/model.safetensors" "h['transformer.wpe.weight']['shape']=[32, 31]"; init_hf "tensor 'transformer.wpe.weight' has 4096 bytes, but its shape and dtype F32 make 3968" ;;
  hf_shape_not_config) js_edit "$w/hf/config.json" "h['n_positions']=64"; init_hf "tensor 'transformer.wpe.weight' has shape \[32, 32\], but config.json \(.*n_positions 64.*\) makes \[64, 32\]" ;;
  hf_missing_tensor) st_edit "$w/hf/model.safetensors" "h['transformer.h.1.mlp.c_fc.bais']=h.pop('transformer.h.1.mlp.c_fc.bias')"; init_hf "has no tensor 'transformer.h.1.mlp.c_fc.bias' \(nor 'h.1.mlp.c_fc.bias'\), which a GPT-2 of config.json" ;;
  hf_unexpected_tensor) st_edit "$w/hf/model.safetensors" "e=h['transformer.ln_f.bias']['data_offsets'][1]; h['transformer.h.0.mlp.gate.weight']={'dtype':'F32','shape':[2],'data_offsets':[e,e+8]}; b+=bytes(8)"; init_hf "holds the tensor 'transformer.h.0.mlp.gate.weight', which is not part of a GPT-2" ;;
  hf_untied_lm_head) st_edit "$w/hf/model.safetensors" "e=h['transformer.ln_f.bias']['data_offsets'][1]; h['lm_head.weight']={'dtype':'F32','shape':[257,32],'data_offsets':[e,e+257*32*4]}; b+=bytes(257*32*4)"; init_hf "lm_head.weight differs from transformer.wte.weight: the trainer ties the LM head" ;;
  hf_config_missing_key) js_edit "$w/hf/config.json" "del h['n_head']"; init_hf "hf/config.json: has no \"n_head\"" ;;
  hf_config_not_json) echo "{" > "$w/hf/config.json"; init_hf "hf/config.json: not valid JSON" ;;
  hf_config_other_activation) js_edit "$w/hf/config.json" "h['activation_function']='relu'"; init_hf "hf/config.json: activation_function \"relu\": the trainer's GELU is the tanh approximation" ;;
  hf_no_config) rm "$w/hf/config.json"; run2 "--init .*hf/config.json: No such file or directory \(a Hugging Face model needs model.safetensors and config.json\)" --train "$w/train.bin" --init "$w/hf" ;;
  hf_init_empty_directory) mkdir "$w/empty"; run2 "--init .*/empty is a directory, expected a file \(an llm.c checkpoint\), a checkpoint directory .* or a Hugging Face model directory" --train "$w/train.bin" --init "$w/empty" ;;
  hf_save_dir_under_file) run2 "--save .*train.bin/out: .*train.bin exists and is not a directory" --train "$w/train.bin" --save "$w/train.bin/out/" ;;
  tokenizer_hf_bad_merge) hf_tokenizer "$w/tok" "a bc"; run1 "tok/merges.txt: line 2 'a bc' merges into 'abc', but its right token is not in .*tok/vocab.json" --train "$w/train.bin" --tokenizer "$w/tok" ;;
  tokenizer_hf_no_merges) hf_tokenizer "$w/tok" "a b"; rm "$w/tok/merges.txt"; run2 "--tokenizer .*tok/merges.txt: No such file or directory \(a Hugging Face tokenizer is vocab.json and merges.txt side by side\)" --train "$w/train.bin" --tokenizer "$w/tok" ;;
  # ---- llm.c token shard (--train)
  shard_truncated_header) cut_to "$w/train.bin" 10; shard "token shard .*train.bin is truncated: expected a header of 1024 bytes, the file has 10" ;;
  shard_wrong_magic) put "$w/train.bin" 0 '<i' 1; shard "token shard .*train.bin has magic 1, expected 20240520" ;;
  shard_wrong_version) put "$w/train.bin" 4 '<i' 2; shard "token shard .*train.bin has version 2, expected 1" ;;
  shard_count_past_end) n=$(( ($(size "$w/train.bin") - 1024) / 2 + 10 )); put "$w/train.bin" 8 '<i' $n
                        shard "token shard .*train.bin: header says $n tokens, so expected [0-9]+ bytes, but the file has [0-9]+ bytes \(truncated\)" ;;
  shard_negative_count) put "$w/train.bin" 8 '<i' -5; shard "token shard .*train.bin: header says -5 tokens" ;;
  shard_trailing_bytes) append "$w/train.bin" 2; shard "token shard .*train.bin: .*\(trailing data\)" ;;
  # A bad id is found when its batch is read (never by a scan of the whole shard): batch 0, in the part of
  # DP rank 1 of 2, which stops both ranks together.
  shard_token_out_of_range) put "$w/train.bin" 1100 '<H' 300
    exec bash "$here/expect_error.sh" "token shard .*train.bin: token 300 at position 38 is not below the vocabulary size 257" \
      $mpirun -np 2 "$train" $T --train "$w/train.bin" --no-shuffle ;;
  # ---- several shards (--train PATTERN, data/dataloader.cu): a pattern that matches nothing; a bad shard among good ones
  data_pattern_no_match) run1 "the pattern .*nothing_\\*\.bin matches no file" --train "$w/nothing_*.bin" ;;
  data_bad_shard_among_good) mkdir "$w/parts"; cp "$w/train.bin" "$w/parts/p_0.bin"; cp "$w/train.bin" "$w/parts/p_1.bin"; cp "$w/train.bin" "$w/parts/p_2.bin"
    put "$w/parts/p_1.bin" 0 '<i' 7; run1 "token shard .*parts/p_1.bin has magic 7, expected 20240520" --train "$w/parts/p_*.bin" ;;
  shard_too_few_tokens) python3 -c "import struct; open('$w/train.bin','wb').write(struct.pack('<256i',20240520,1,10,*[0]*253)+bytes(20))"
                        shard "token shard .*train.bin holds 10 tokens, but one batch of B=4 sequences of T=16 tokens needs at least B\*T\+1 = 65" ;;
  # ---- the GPT-2 tokenizer (--tokenizer) and the HellaSwag eval file (--hellaswag)
  tokenizer_wrong_magic) tokenizer "$w/tok.bin" 20240520; run1 "tok.bin: not a tokenizer file \(magic 20240520, expected 20240328\)" --train "$w/train.bin" --tokenizer "$w/tok.bin" ;;
  tokenizer_vocab_mismatch) tokenizer "$w/tok.bin" 20240328; run1 "the tokenizer \(.*tok.bin\) has 258 tokens but the model's vocabulary is 257" --train "$w/train.bin" --tokenizer "$w/tok.bin" ;;
  eval_cut_short) eval_file "$w/eval.bin" 6; run1 "eval.bin: example 1 of 2 is cut short" --train "$w/train.bin" --hellaswag "$w/eval.bin" ;;
  # ---- resume: the checkpoint directory and the training state (--resume)
  resume_missing_dir) run1 "--resume $w/nowhere: no checkpoint there \(cannot open $w/nowhere/latest" --train "$w/train.bin" --resume "$w/nowhere" ;;
  resume_bad_latest) echo "../../etc" > "$w/ck/latest"; resume "checkpoint pointer .*latest should hold one line 'step_' \+ digits" ;;
  resume_latest_names_missing) echo "step_00000099" > "$w/ck/latest"; resume "latest names step_00000099, but .*step_00000099 is not there .*resume from the pair that is there: echo step_00000002 > .*latest and run again with --resume" ;;
  resume_latest_names_missing_none_left) echo "step_00000099" > "$w/ck/latest"; rm -r "$w/ck/step_00000002"; resume "latest names step_00000099, but .*step_00000099 is not there .*holds no step_N pair: restore step_00000099, or start a new run without --resume" ;;
  state_missing) rm "$state"; resume "state.bin is missing .*an exact continuation needs the training state .*use --init .*ck/step_00000002 instead of --resume" ;;
  state_truncated_header) cut_to "$state" 500; resume "training state .*state.bin: truncated: expected at least a header of 1024 bytes, the file has 500" ;;
  state_truncated_moments) cut_to "$state" -8; resume "training state .*state.bin: has [0-9]+ bytes, expected [0-9]+ \(header \+ AdamW m and v of [0-9]+ parameters\): truncated" ;;
  state_trailing_bytes) append "$state" 4; resume "training state .*state.bin: has [0-9]+ bytes, expected [0-9]+ .*oversized" ;;
  state_wrong_magic) put "$state" 0 '<q' 7; resume "training state .*state.bin: wrong magic 7, expected 4995689717091814733" ;;
  state_wrong_version) put "$state" 8 '<q' 7; resume "training state .*state.bin: version 7, expected 1" ;;
  state_oversized_field) put "$state" 32 '<q' 1099511627776; resume "training state .*state.bin: model size field 4 = 1099511627776 is out of range" ;;
  state_bad_layout_field) put "$state" 96 '<q' 3; resume "training state .*state.bin: sp = 3 is out of range \[0, 1\]" ;;
  state_corrupt_moments) put "$state" 2000 '<i' 123456789; resume "training state .*state.bin: the AdamW moments do not match the header's checksum" ;;
  state_data_position_past_end) put "$state" 136 '<q' 1000000; resume "state.bin: data position 1000000 is past the [0-9]+ batches of an epoch" ;;
  state_model_from_elsewhere) put "$model" 5000 '<i' 1065353216; resume "model.bin is not the model that .*state.bin was saved with" ;;
  state_step_not_directory) mv "$w/ck/step_00000002" "$w/ck/step_00000003"; echo step_00000003 > "$w/ck/latest"
                            resume "state.bin holds step 2, but its directory is step_00000003" ;;
  resume_batch_mismatch) resume "--batch 8 differs from the checkpoint's 4 .*state.bin\); an exact continuation needs the same value" --batch 8 ;;
  resume_seq_mismatch) resume "--seq 8 differs from the checkpoint's 16" --seq 8 ;;
  resume_seed_mismatch) resume "--seed 7 differs from the checkpoint's 1337" --seed 7 ;;
  resume_lr_mismatch) resume "--lr 0.00999999978 differs from the checkpoint's 0.000300000014" --lr 0.01 ;;
  resume_steps_cosine) resume "--steps 6 differs from the checkpoint's 4 .its cosine schedule decays over 4 steps.*--override-opt_param-scheduler" --steps 6 ;;
  resume_schedule_by_name) resume "--lr-schedule constant differs from the checkpoint's cosine .*--override-opt_param-scheduler.*--use-checkpoint-opt_param-scheduler" --lr-schedule constant ;;
  resume_override_and_checkpoint_schedule) run2 "--override-opt_param-scheduler .this run's schedule. contradicts --use-checkpoint-opt_param-scheduler" --train "$w/train.bin" --resume "$w/ck" --override-opt_param-scheduler --use-checkpoint-opt_param-scheduler ;;
  resume_shuffle_mismatch) resume "--no-shuffle .file order. differs from the checkpoint's shuffled order" --no-shuffle ;;
  resume_other_data) cp "$fix/val.bin" "$w/other.bin"; run1 "--train: the training data \([0-9]+ tokens\) is not the data the checkpoint" --train "$w/other.bin" --resume "$w/ck" ;;
  resume_mismatch_two_ranks) exec bash "$here/expect_error.sh" --exit 1 "--batch 8 differs from the checkpoint's 4" \
                               $mpirun -np 2 "$train" $T --tp 2 --sp --train "$w/train.bin" --resume "$w/ck" --batch 8 ;;
  # ---- flag combinations
  flag_save_every_without_dir) run1 "--save-every 2 needs --checkpoint-dir DIR" --train "$w/train.bin" --save-every 2 ;;
  flag_save_every_zero) run1 "--save-every 0 is out of range \[1, " --train "$w/train.bin" --save-every 0 --checkpoint-dir "$w/c" ;;
  flag_resume_auto_without_dir) run1 "--resume auto needs --checkpoint-dir DIR" --train "$w/train.bin" --resume auto ;;
  flag_resume_init_other_dir) run1 "--resume .*ck with --init and another --checkpoint-dir .*other: a restartable job resumes from and saves to one directory" --train "$w/train.bin" --init "$w/model.bin" --resume "$w/ck" --checkpoint-dir "$w/other" ;;
  flag_checkpoint_dir_is_file) run2 "--checkpoint-dir .*train.bin: .*train.bin exists and is not a directory" --train "$w/train.bin" --checkpoint-dir "$w/train.bin" --save-every 1 ;;
  flag_save_is_checkpoint_dir) run1 "--save .* is the --checkpoint-dir too" --train "$w/train.bin" --checkpoint-dir "$w/x" --save "$w/x" ;;
  flag_exit_interval_without_dir) run2 "--exit-interval 2 needs --checkpoint-dir DIR" --train "$w/train.bin" --exit-interval 2 ;;
  flag_exit_interval_zero) run1 "--exit-interval 0 is out of range \[1, " --train "$w/train.bin" --exit-interval 0 ;;
  flag_comm_timeout_zero) run1 "--comm-timeout 0 is out of range \[0.1, 1e6\]" --train "$w/train.bin" --comm-timeout 0 ;;
  layout_cp_pp_world) run2 "not divisible by tp x cp x pp = 1 x 2 x 3 = 6" --train "$w/train.bin" --layers 3 --cp 2 --pp 3 ;;
  # ---- every path checked at start, on 2 ranks, before the first step (train_gpt.cu's check_paths)
  path_save_dir_under_file) run2 "--save .*train.bin/no: .*train.bin exists and is not a directory \(the directory of .*train.bin/no/model.bin\)" --train "$w/train.bin" --steps 300 --save "$w/train.bin/no/model.bin" ;;
  path_save_is_directory) run2 "--save .*/ck is a directory, expected a file name" --train "$w/train.bin" --save "$w/ck" ;;
  path_checkpoint_dir_under_file) run2 "--checkpoint-dir .*train.bin/x: .*train.bin exists and is not a directory" --train "$w/train.bin" --checkpoint-dir "$w/train.bin/x" --save-every 200 --steps 300 ;;
  path_log_dir_under_file) run2 "--log .*train.bin: .*train.bin exists and is not a directory \(the directory of .*train.bin/log.jsonl\)" --train "$w/train.bin" --log "$w/train.bin/log.jsonl" ;;
  path_val_missing) run2 "--val .*typo.bin: No such file or directory" --train "$w/train.bin" --val "$w/typo.bin" ;;
  path_train_is_directory) run2 "--train .*/ck is a directory, expected a file" --train "$w/ck" ;;
  path_train_pattern_directory) mkdir -p "$w/d/p_1.bin"; run2 "token shard .*/d/p_1.bin is a directory, expected a file" --train "$w/d/p_*.bin" ;;
  path_init_is_directory) mkdir "$w/notes"; echo hi > "$w/notes/notes.txt"; run2 "--init .*/notes is a directory, expected a file" --train "$w/train.bin" --init "$w/notes" ;;
  path_tokenizer_missing) run2 "--tokenizer .*nope.bin: No such file or directory" --train "$w/train.bin" --tokenizer "$w/nope.bin" ;;
  path_save_in_proc) run2 "--save /proc: /proc is the kernel's process information \(proc\), where no file can be made .*choose a directory on a disk" --train "$w/train.bin" --save /proc/model.bin ;;
  path_checkpoint_dir_in_proc) run2 "--checkpoint-dir /proc/ck: /proc is the kernel's process information \(proc\), where no file can be made" --train "$w/train.bin" --checkpoint-dir /proc/ck ;;
  # ---- one writer per checkpoint directory (data/writer_lock.h): the holder named; $$ stays alive through exec
  lock_held) echo "pid $$ host $(hostname)" > "$w/ck/lock"; run2 "--checkpoint-dir .*ck is in use: the run with pid $$ on this host .* holds .*ck/lock and writes its checkpoints there" --train "$w/train.bin" --resume "$w/ck" ;;
  lock_other_host) echo "pid 1 host elsewhere.invalid" > "$w/ck/lock"; run2 "--checkpoint-dir .*ck is in use: .*ck/lock says the run with pid 1 on host elsewhere.invalid writes its checkpoints there.*if that run is gone, remove" --train "$w/train.bin" --checkpoint-dir "$w/ck" --steps 1 ;;
  path_hellaswag_is_directory) run2 "--hellaswag .*/ck is a directory, expected a file" --train "$w/train.bin" --hellaswag "$w/ck" ;;
  # ---- a shape flag against the checkpoint's shape (check_shape_flags)
  shape_init_layers) run2 "--layers 8 contradicts --init .*model.bin, whose model has L = 2" --train "$w/train.bin" --init "$w/model.bin" --layers 8 ;;
  shape_init_hidden_equals) run2 "--hidden 256 contradicts --init .*model.bin, whose model has C = 32" --train "$w/train.bin" --init "$w/model.bin" --hidden=256 ;;
  shape_resume_heads) run2 "--heads 8 contradicts the checkpoint in --resume .*ck, whose model has NH = 4" --train "$w/train.bin" --resume "$w/ck" --heads 8 ;;
  flag_val_every_val_none) run2 "--val-every 2 with --val none: there is no validation data" --train "$w/train.bin" --val-every 2 ;;
  flag_log_over_input) run2 "--log .*train.bin is the --train file: the run would overwrite its input" --train "$w/train.bin" --log "$w/train.bin" ;;
  flag_switch_with_value) run2 "--sp takes no value, got '--sp=1'" --train "$w/train.bin" --sp=1 ;;
  # ---- a file of another format where an llm.c file is expected: named as such, with the command that makes one
  init_text_file) run1 "checkpoint .*text.txt has magic [0-9]+, expected 20240326; .*text.txt is a text file, not an llm.c model checkpoint: train_gpt --save FILE" --train "$w/train.bin" --init "$w/text.txt" ;;
  train_text_file) run1 "token shard .*text.txt has magic [0-9]+, expected 20240520; .*text.txt is a text file, not an llm.c token shard: build/prepare_data --out-dir DIR" --train "$w/text.txt" ;;
  init_shard_file) run1 "train.bin is an llm.c token shard, not an llm.c model checkpoint: train_gpt --save FILE" --train "$w/train.bin" --init "$w/train.bin" ;;
  tokenizer_text_file) run1 "text.txt: not a tokenizer file .magic [0-9]+, expected 20240328.; .*text.txt is a text file, not an llm.c tokenizer file: llm.c's train_gpt2.py" --train "$w/train.bin" --tokenizer "$w/text.txt" ;;
  # ---- an allocation that cannot fit (the address space capped at 4 GB): the buffer named, its size in GiB
  oom_names_buffer) capped "out of host memory: the model state '[a-z_]+' .[0-9]+ f32. needs [0-9.]+ GiB" --train "$w/train.bin" --layers 64 --hidden 8192 --heads 64 ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
