# Tests that drive the `tetra` binary from scripts (label `unit`: one process at a time).
# None depends on time or speed. RUN_SERIAL marks the ones that launch many
# 4- and 8-rank jobs: alone, they do not multiply the oversubscription of the
# cores with other tests' ranks (their timeouts stay far from being reached).
# The layout checks (tests/layouts/) are one entry per case instead, at the end.
add_test(NAME reference.llama_untied_gqa
         COMMAND ${PROJECT_SOURCE_DIR}/tests/reference/check_against_reference.sh $<TARGET_FILE:tetra>)
add_test(NAME reference.llama_tied
         COMMAND ${PROJECT_SOURCE_DIR}/tests/reference/check_against_reference.sh $<TARGET_FILE:tetra>
                 --tie --kv-heads 4 --seed 3)
# MLA (DeepseekV3Attention) dense blocks, with a query latent and without; lr 1e-2
# and 8 rotary dims make a wrong rope_interleave fail (losses differ by ~3e-4).
add_test(NAME reference.mla_dense_q_lora
         COMMAND ${PROJECT_SOURCE_DIR}/tests/reference/check_against_reference.sh $<TARGET_FILE:tetra>
                 --kv-lora-rank 16 --q-lora-rank 24 --qk-nope-dim 8 --qk-rope-dim 8
                 --v-head-dim 6 --kv-heads 4 --lr 1e-2 --rope-interleave true)
add_test(NAME reference.mla_dense_no_q_lora
         COMMAND ${PROJECT_SOURCE_DIR}/tests/reference/check_against_reference.sh $<TARGET_FILE:tetra>
                 --kv-lora-rank 16 --q-lora-rank 0 --qk-nope-dim 8 --qk-rope-dim 8
                 --v-head-dim 6 --kv-heads 4 --lr 1e-2 --rope-interleave true --tie --seed 5)
# MLA with YaRN (frequencies kept, blended and interpolated, an attention
# factor other than 1, the softmax's mscale^2) and two chained multi-token
# prediction depths, 20 steps; each deliberate error tried in the reference
# (a missing mscale, a wrong ramp, the join's order, the shift, h_0 before the
# norm, the depth's token count) moves the losses by 6e-4 or more.
add_test(NAME reference.mla_yarn_mtp
         COMMAND ${PROJECT_SOURCE_DIR}/tests/reference/check_against_reference.sh $<TARGET_FILE:tetra>
                 --kv-lora-rank 8 --q-lora-rank 8 --qk-rope-dim 8 --yarn-factor 16
                 --yarn-original-max-pos 64 --yarn-mscale 2 --yarn-mscale-all-dim 1 --mtp-depth 2
                 --mtp-scale 0.3 --lr 1e-2 --steps 20)
# DeepSeek-V3's shape: MLA, a dense first layer, then MoE (group-limited
# top-2 of 8, a shared expert, balance loss, bias updates) and an MoE
# prediction depth; step 1 within 1e-5, 10 steps within 5e-4 (a near-tied
# router choice may flip under round-off; seed 1's smallest margin is 4.8e-5).
add_test(NAME reference.mla_moe_mtp
         COMMAND ${PROJECT_SOURCE_DIR}/tests/reference/check_against_reference.sh $<TARGET_FILE:tetra>
                 --layers 2 --first-k-dense 1 --moe-experts 8 --moe-topk 2 --moe-shared 1
                 --moe-intermediate 16 --n-group 2 --topk-group 1 --routed-scaling 2.5
                 --aux-loss-alpha 0.1 --bias-update-speed 0.01 --kv-lora-rank 8 --q-lora-rank 8
                 --mtp-depth 1 --mtp-scale 0.3 --seed 1 -- --rtol 5e-4 --step1-rtol 1e-5)
set_tests_properties(reference.llama_untied_gqa reference.llama_tied reference.mla_dense_q_lora
                     reference.mla_dense_no_q_lora reference.mla_yarn_mtp reference.mla_moe_mtp
                     PROPERTIES LABELS unit TIMEOUT 300)
add_test(NAME recipes.tiny_dense_reaches_floor
         COMMAND ${PROJECT_SOURCE_DIR}/tests/recipes/check_default_recipe.sh $<TARGET_FILE:tetra>)
set_tests_properties(recipes.tiny_dense_reaches_floor PROPERTIES LABELS unit TIMEOUT 400)

add_test(NAME trace.perfetto_schema_per_rank
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/observe/check_trace.py $<TARGET_FILE:tetra> ${MPIEXEC_EXECUTABLE})
set_tests_properties(trace.perfetto_schema_per_rank PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
# A pipeline stage with 14 of 16 layers is named as the straggler in the
# metrics, the progress stream and the report (most steps, no timing bound).
add_test(NAME straggler.busiest_rank_is_named
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/observe/check_straggler.py $<TARGET_FILE:tetra> ${MPIEXEC_EXECUTABLE})
set_tests_properties(straggler.busiest_rank_is_named PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
add_test(NAME report.cpu_scaling_study
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/tools/check_scaling_report.py $<TARGET_FILE:tetra> ${MPIEXEC_EXECUTABLE})
set_tests_properties(report.cpu_scaling_study PROPERTIES LABELS mpi TIMEOUT 900 RUN_SERIAL ON)
# The report's page as headless Chromium renders it, from committed metrics files
# (no mpirun): numbers with units and separators, 1-2-5 axes, nothing overlapping.
add_test(NAME report.page_reads_like_a_chart
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/tools/check_report_page.py $<TARGET_FILE:tetra>)
set_tests_properties(report.page_reads_like_a_chart PROPERTIES LABELS unit TIMEOUT 180 SKIP_RETURN_CODE 77)
add_test(NAME checkpoints.resume_and_reshard_under_mpirun
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/checkpoint/check_checkpoints.py $<TARGET_FILE:tetra>)
set_tests_properties(checkpoints.resume_and_reshard_under_mpirun PROPERTIES LABELS mpi TIMEOUT 600 RUN_SERIAL ON)
# tetra launch: a rank killed mid-run, the job re-planned and resumed on the
# ranks left with the same losses; no restart for a diverging run; Slurm's
# relaunch with srun --exclude through a fake srun.
add_test(NAME launch.elastic_restart_keeps_the_loss_curve
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/launch/check_elastic_launch.py $<TARGET_FILE:tetra>)
set_tests_properties(launch.elastic_restart_keeps_the_loss_curve PROPERTIES LABELS mpi TIMEOUT 600 RUN_SERIAL ON)
# Two hosts made of network namespaces joined by a veth link (root and `ip
# netns` needed, else skipped): one host's processes killed, then its link
# cut; the launch goes on on the other with the same losses.
add_test(NAME launch.multi_host_survives_a_lost_host
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/launch/check_multi_host.py $<TARGET_FILE:tetra>)
set_tests_properties(launch.multi_host_survives_a_lost_host PROPERTIES LABELS mpi TIMEOUT 900
                     RUN_SERIAL ON SKIP_RETURN_CODE 77)
# checkpoint.async: the same files as synchronous saves, exact resume, a failed
# background write fails the run, SIGKILL with a save in flight leaves the previous one.
add_test(NAME checkpoints.async_saves_match_sync
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/checkpoint/check_async_checkpoints.py
                 $<TARGET_FILE:tetra> ${Protobuf_PROTOC_EXECUTABLE})
set_tests_properties(checkpoints.async_saves_match_sync PROPERTIES LABELS mpi TIMEOUT 600)
add_test(NAME readme.commands_run_as_written
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/tools/check_readme_commands.py $<TARGET_FILE:tetra>
                 ${TETRA_EMULATED_GPU_BINARY})
set_tests_properties(readme.commands_run_as_written PROPERTIES LABELS mpi TIMEOUT 900)
# Checks against other projects' readers and writers (transformers, TensorBoard),
# in the Python environment scripts/setup.sh makes in build/pyenv.
add_test(NAME reference.hf_directories_match_transformers
         COMMAND ${PROJECT_BINARY_DIR}/pyenv/bin/python ${PROJECT_SOURCE_DIR}/tests/reference/check_hf_directory.py $<TARGET_FILE:tetra>)
add_test(NAME reference.hf_families_match_transformers
         COMMAND ${PROJECT_BINARY_DIR}/pyenv/bin/python ${PROJECT_SOURCE_DIR}/tests/reference/check_hf_families.py $<TARGET_FILE:tetra>
                 ${TETRA_EMULATED_GPU_BINARY})
add_test(NAME tensorboard.reader_sees_every_metric
         COMMAND ${PROJECT_BINARY_DIR}/pyenv/bin/python ${PROJECT_SOURCE_DIR}/tests/observe/check_tensorboard.py $<TARGET_FILE:tetra>)
set_tests_properties(reference.hf_directories_match_transformers reference.hf_families_match_transformers
                     tensorboard.reader_sees_every_metric PROPERTIES LABELS mpi TIMEOUT 600)
# The layer table: a folder includes only itself and the folders above it.
add_test(NAME structure.includes_point_up
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/structure/check_include_layers.py)
set_tests_properties(structure.includes_point_up PROPERTIES LABELS unit TIMEOUT 60)
# Hostile command lines through the real binary (issue 32 item 6's classes: outputs
# naming a FIFO, directory or device; absurd weights; a renamed checkpoint step;
# bad configs, --set values and launch flags): each refused with one error and a
# hint, none hangs (120 s each), nothing at the paths lost. About 10-20 s here.
add_test(NAME fuzz.hostile_command_lines
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/fuzz/check_hostile_command_lines.py $<TARGET_FILE:tetra>)
set_tests_properties(fuzz.hostile_command_lines PROPERTIES LABELS unit TIMEOUT 300)
# Every library and tool function is under 60 lines.
add_test(NAME structure.functions_under_60_lines
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/structure/check_function_length.py)
set_tests_properties(structure.functions_under_60_lines PROPERTIES LABELS unit TIMEOUT 60)
# Every Markdown link resolves inside the repository; nothing cites a document outside it.
add_test(NAME structure.links_stay_in_the_repository
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/structure/check_repository_links.py)
set_tests_properties(structure.links_stay_in_the_repository PROPERTIES LABELS unit TIMEOUT 60)
# Every C++/CUDA file is formatted as .clang-format says (clang-format 14).
add_test(NAME structure.clang_format COMMAND ${PROJECT_SOURCE_DIR}/tools/format.sh --check)
set_tests_properties(structure.clang_format PROPERTIES LABELS unit TIMEOUT 120)
# The GPU machine's bundle (tools/gpu/make_gpu_bundle.sh) runs a 2-rank job by itself.
add_test(NAME gpu_bundle.runs_a_two_rank_job_by_itself
         COMMAND ${PROJECT_SOURCE_DIR}/tests/tools/check_gpu_bundle.sh ${PROJECT_BINARY_DIR})
set_tests_properties(gpu_bundle.runs_a_two_rank_job_by_itself PROPERTIES LABELS mpi TIMEOUT 300
                     SKIP_RETURN_CODE 77)
# The GPU checks' preflight finds CUDA 13's libraries in nvidia-* wheels with the
# toolkit hidden (a mount namespace: skipped where this user cannot make one),
# and the GPU tests' runner lets no crashing or hanging test hide the others.
add_test(NAME gpu_checks.preflight_finds_libraries_in_wheels
         COMMAND ${PROJECT_SOURCE_DIR}/tests/tools/check_gpu_preflight.sh ${PROJECT_BINARY_DIR})
add_test(NAME gpu_checks.gtest_runner_isolates_crashes_and_hangs
         COMMAND ${PROJECT_SOURCE_DIR}/tests/tools/check_gtest_runner.sh)
set_tests_properties(gpu_checks.preflight_finds_libraries_in_wheels gpu_checks.gtest_runner_isolates_crashes_and_hangs
                     PROPERTIES LABELS unit TIMEOUT 180 SKIP_RETURN_CODE 77)
# tools/data/prepare.py against megatron-core's IndexedDatasetBuilder and transformers'
# tokenizer, and tetra training on its output, in build/pyenv.
add_test(NAME data.prepare_matches_megatron_builder
         COMMAND ${PROJECT_BINARY_DIR}/pyenv/bin/python ${PROJECT_SOURCE_DIR}/tests/data/check_prepare.py $<TARGET_FILE:tetra>)
set_tests_properties(data.prepare_matches_megatron_builder PROPERTIES LABELS unit TIMEOUT 300)

# The layout checks, tests/layouts/check_*.py: one entry per case of each
# check's case table, layouts.CHECK.CASE, as `check_*.py --list-ctest` lists
# them here at configure time (a check that lists nothing stops the configure).
# The single-rank runs that several cases compare against are entries of their
# own, layouts.CHECK.baseline.NAME: fixtures that the cases require, computed
# once into build/layouts-work/baselines/ and found there by the cases (and by
# later runs: the cache key holds the binary's path, size and time and the
# checks' code). PROCESSORS is the most ranks a case runs at once, so under
# ctest -j2 a case of 2 or more ranks runs alone (its ranks take both cores,
# more ranks only oversubscribe them) while baselines and single-rank cases
# run two at a time. TIMEOUT: 60 s, plus 15 s per rank of each run a case
# launches (a run takes 0.3-5 s here). tests/README.md: running them by hand.
set(tetra_layouts_work ${PROJECT_BINARY_DIR}/layouts-work)
file(GLOB tetra_layout_checks CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/layouts/check_*.py)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${tetra_layout_checks}
             ${PROJECT_SOURCE_DIR}/tests/testing/case_table.py ${PROJECT_SOURCE_DIR}/tests/testing/tetra_runs.py)
foreach(script ${tetra_layout_checks})
  execute_process(COMMAND /usr/bin/python3 ${script} --list-ctest
                  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE failed)
  if(failed OR NOT listing MATCHES "^check [A-Za-z0-9_]+\n")
    message(FATAL_ERROR "${script} --list-ctest failed (${failed}):\n${errors}")
  endif()
  string(REGEX REPLACE "\n$" "" listing "${listing}")
  string(REPLACE "\n" ";" lines "${listing}")
  set(cases 0)
  foreach(line IN LISTS lines)
    separate_arguments(fields UNIX_COMMAND "${line}")
    list(POP_FRONT fields kind name)
    if(kind STREQUAL "check")
      set(check ${name})
      continue()
    endif()
    list(POP_FRONT fields ranks timeout)
    set(command /usr/bin/python3 ${script} $<TARGET_FILE:tetra> --work-dir ${tetra_layouts_work})
    if(kind STREQUAL "baseline")
      set(test layouts.${check}.baseline.${name})
      add_test(NAME ${test} COMMAND ${command} --baseline ${name})
      set_tests_properties(${test} PROPERTIES FIXTURES_SETUP layouts.${check}.${name})
    elseif(kind STREQUAL "case")
      set(test layouts.${check}.${name})
      add_test(NAME ${test} COMMAND ${command} --case ${name})
      if(fields)
        list(TRANSFORM fields PREPEND layouts.${check}.)
        set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED "${fields}")
      endif()
      math(EXPR cases "${cases} + 1")
    else()
      message(FATAL_ERROR "${script} --list-ctest: unknown line '${line}'")
    endif()
    set_tests_properties(${test} PROPERTIES LABELS "layouts;mpi" TIMEOUT ${timeout} PROCESSORS ${ranks})
  endforeach()
  if(cases EQUAL 0)
    message(FATAL_ERROR "${script} --list-ctest lists no case")
  endif()
endforeach()
