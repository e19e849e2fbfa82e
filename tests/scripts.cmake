# Tests that drive the `tetra` binary from scripts (label `unit`: one process at a time).
add_test(NAME reference.llama_untied_gqa
         COMMAND ${PROJECT_SOURCE_DIR}/tests/reference/check_against_reference.sh $<TARGET_FILE:tetra>)
add_test(NAME reference.llama_tied
         COMMAND ${PROJECT_SOURCE_DIR}/tests/reference/check_against_reference.sh $<TARGET_FILE:tetra>
                 --tie --kv-heads 4 --seed 3)
set_tests_properties(reference.llama_untied_gqa reference.llama_tied PROPERTIES LABELS unit TIMEOUT 300)
add_test(NAME recipes.tiny_dense_reaches_floor
         COMMAND ${PROJECT_SOURCE_DIR}/tests/recipes/check_default_recipe.sh $<TARGET_FILE:tetra>)
set_tests_properties(recipes.tiny_dense_reaches_floor PROPERTIES LABELS unit TIMEOUT 400 RUN_SERIAL ON)
add_test(NAME layouts.parallel_layouts_match_single_rank
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/layouts/check_layouts.py $<TARGET_FILE:tetra>)
set_tests_properties(layouts.parallel_layouts_match_single_rank PROPERTIES LABELS mpi TIMEOUT 1200 RUN_SERIAL ON)
add_test(NAME layouts.moe_layouts_match_single_rank
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/layouts/check_moe_layouts.py $<TARGET_FILE:tetra>)
set_tests_properties(layouts.moe_layouts_match_single_rank PROPERTIES LABELS mpi TIMEOUT 900 RUN_SERIAL ON)
