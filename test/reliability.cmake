# Reliability: exact resume, crash-safe checkpoints, numerical faults, and the table of bad inputs
# (docs/bad_inputs.md). Every test runs the real trainer on CPU ranks under mpirun.
set(MM_REL_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
set(MM_REL_TOOLS $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
function(mm_reliability_test name script)
  add_test(NAME ${name} COMMAND bash ${CMAKE_SOURCE_DIR}/test/${script} ${MM_REL_TOOLS} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${MM_REL_ENV}")
endfunction()

# 20 steps straight == 10 steps, stop, --resume to 20: identical losses (bitwise) and final parameters.
mm_reliability_test(resume_bitwise_tp1 test_resume.sh 1)
mm_reliability_test(resume_bitwise_tp2_sp test_resume.sh 2 --tp 2 --sp --recompute selective)
mm_reliability_test(resume_bitwise_dp2 test_resume.sh 2 --tp 1)
# The distributed optimizer (ZeRO-1): saved at dp 2 with it, resumed at dp 2 with it bitwise and at dp 1
# without it (said equivalent); saved with it and resumed without, and the other way round, bitwise at dp 2.
mm_reliability_test(resume_bitwise_pp2 test_resume.sh 2 --pp 2 --num-microbatches 2)
mm_reliability_test(resume_bitwise_tp2_pp2_sp test_resume.sh 4 --tp 2 --sp --pp 2 --num-microbatches 2)
mm_reliability_test(resume_bitwise_zero_dp2 test_resume.sh 2 --tp 1 --zero 1)
# Context parallelism: bitwise at cp 2, and the checkpoint (which holds nothing of c) resumed at cp 1, said to
# be equivalent.
mm_reliability_test(resume_bitwise_cp2 test_resume.sh 2 --cp 2 --attention flash)
mm_reliability_test(resume_zero_crossed_dp2 test_resume_zero.sh 2)
mm_reliability_test(resume_zero_crossed_tp2_dp2_sp_bf16 test_resume_zero.sh 4 --tp 2 --sp --dtype bf16)
# ZeRO-2 and ZeRO-3 (parallel/zero_sharding.h): the same layout resumes bitwise, and at one rank (equivalent);
# checkpoints cross every stage at dp 2 bitwise (the format does not change).
mm_reliability_test(resume_bitwise_zero3_dp2 test_resume.sh 2 --tp 1 --zero 3)
mm_reliability_test(resume_zero_crossed_stages_dp2 test_resume_zero.sh 2 --stages "3:1 2:3 0:2" --dtype bf16)
# The same over a pattern of shards of 10 batches each: the resumed run crosses shard boundaries bitwise.
mm_reliability_test(resume_bitwise_shards test_resume.sh 1 --shards)
# Extending a finished cosine run on purpose (--override-opt_param-scheduler) at another layout: the loss continues
# and the rate follows the new schedule; without the flag it is refused on every rank, values by name.
mm_reliability_test(resume_extend_tp2_sp test_resume_extend.sh 2 --tp 2 --sp)
# A checkpoint directory where a model file is read: train_gpt --init (DIR, DIR/latest, DIR/step_N), generate
# --init, the Hugging Face export; each says the step it read; a broken pointer is refused.
add_test(NAME init_checkpoint_dir COMMAND bash ${CMAKE_SOURCE_DIR}/test/test_init_checkpoint_dir.sh ${MM_REL_TOOLS}
         $<TARGET_FILE:generate>)
set_tests_properties(init_checkpoint_dir PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${MM_REL_ENV}")
# A restartable job script: the same command (--resume auto, --exit-interval) run three times == one run.
mm_reliability_test(restart_job_tp1 test_restart.sh 1)
mm_reliability_test(restart_job_tp2_sp test_restart.sh 2 --tp 2 --sp)
# SIGKILL while writing the second checkpoint (fault injection at a chosen byte): the previous checkpoint
# still loads, and resuming from it ends where the uninterrupted run ends.
foreach(where start model state latest)
  mm_reliability_test(crash_during_save_${where} test_crash_save.sh 1 ${where})
endforeach()
mm_reliability_test(crash_during_save_state_tp2 test_crash_save.sh 2 state --tp 2 --sp)
# A save that fails late (its directory removed mid-run): the model and the checkpoint go to rescue paths.
mm_reliability_test(save_fallback_tp2_sp test_save_fallback.sh 2 --tp 2 --sp)
# The done line and the log after --exit-interval, a crash and --resume auto; peaks apart from validation.
add_test(NAME summary_and_log COMMAND bash ${CMAKE_SOURCE_DIR}/test/test_summary.sh ${MM_REL_TOOLS} $<TARGET_FILE:plot_log>)
set_tests_properties(summary_and_log PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${MM_REL_ENV}")
# NaN in a gradient: stop naming the step and the first bad tensor, before any checkpoint; or skip.
mm_reliability_test(nan_stops_tp1 test_nan.sh 1)
mm_reliability_test(nan_stops_tp2_sp test_nan.sh 2 --tp 2 --sp)
mm_reliability_test(nan_stops_zero_dp2 test_nan.sh 2 --zero 1)
# (--optimizer-post-validation: the step is rolled back a step later, named and stopped before its checkpoint)
mm_reliability_test(nan_stops_pp2_post_validation test_nan.sh 2 --pp 2 --optimizer-post-validation)

# The bad-input table: one test per case of test/bad_inputs.sh, sharing one fixture (shards + checkpoint).
set(MM_BAD ${CMAKE_SOURCE_DIR}/test/bad_inputs.sh $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data>
    "${MPIEXEC_EXECUTABLE}" ${CMAKE_BINARY_DIR}/bad_inputs_fixture)
add_test(NAME bad_inputs_setup COMMAND bash ${MM_BAD} setup)
set_tests_properties(bad_inputs_setup PROPERTIES LABELS mpi FIXTURES_SETUP bad_inputs ENVIRONMENT "${MM_REL_ENV}")
set(MM_BAD_CASES
  ckpt_truncated_header ckpt_truncated_params ckpt_trailing_bytes ckpt_wrong_magic ckpt_wrong_version
  ckpt_oversized_hidden ckpt_negative_hidden ckpt_heads_not_dividing ckpt_padded_vocab_small
  shard_truncated_header shard_wrong_magic shard_wrong_version shard_count_past_end shard_negative_count
  shard_trailing_bytes shard_token_out_of_range shard_too_few_tokens data_pattern_no_match data_bad_shard_among_good
  hf_header_past_end hf_header_not_json hf_offsets_overlap hf_offset_out_of_range hf_bytes_unclaimed hf_unknown_dtype
  hf_integer_dtype hf_bytes_not_shape hf_shape_not_config hf_missing_tensor hf_unexpected_tensor hf_untied_lm_head
  hf_config_missing_key hf_config_not_json hf_config_other_activation hf_no_config hf_init_empty_directory hf_save_dir_under_file
  tokenizer_wrong_magic tokenizer_vocab_mismatch tokenizer_hf_bad_merge tokenizer_hf_no_merges eval_cut_short
  resume_missing_dir resume_bad_latest resume_latest_names_missing resume_latest_names_missing_none_left state_missing
  state_truncated_header state_truncated_moments state_trailing_bytes state_wrong_magic state_wrong_version
  state_oversized_field state_bad_layout_field state_corrupt_moments state_data_position_past_end
  state_model_from_elsewhere state_step_not_directory
  resume_batch_mismatch resume_seq_mismatch resume_seed_mismatch resume_lr_mismatch resume_steps_cosine
  resume_shuffle_mismatch resume_other_data resume_mismatch_two_ranks
  flag_save_every_without_dir flag_save_every_zero flag_resume_auto_without_dir flag_resume_init_other_dir flag_checkpoint_dir_is_file
  flag_save_is_checkpoint_dir flag_exit_interval_without_dir flag_exit_interval_zero flag_comm_timeout_zero layout_cp_pp_world
  path_save_dir_under_file path_save_is_directory path_checkpoint_dir_under_file path_log_dir_under_file path_val_missing
  path_train_is_directory path_train_pattern_directory path_init_is_directory path_tokenizer_missing path_hellaswag_is_directory
  path_save_in_proc path_checkpoint_dir_in_proc lock_held lock_other_host
  shape_init_layers shape_init_hidden_equals shape_resume_heads flag_val_every_val_none flag_switch_with_value flag_log_over_input
  init_text_file train_text_file init_shard_file tokenizer_text_file oom_names_buffer resume_schedule_by_name
  resume_override_and_checkpoint_schedule)
foreach(c ${MM_BAD_CASES})
  add_test(NAME bad_${c} COMMAND bash ${MM_BAD} ${c})
  set_tests_properties(bad_${c} PROPERTIES LABELS mpi FIXTURES_REQUIRED bad_inputs TIMEOUT 120 ENVIRONMENT "${MM_REL_ENV}")
endforeach()
# Ctrl-C says what was saved (train/interrupt.h); one writer per checkpoint directory (data/writer_lock.h).
mm_reliability_test(test_interrupt test_interrupt.sh)
