# spec/tests.cmake — registers the Lua specs, the test services and the C tests'
# needs with ctest. Included at the end of CMakeLists.txt.
#
#   unit/<name>         spec/unit/<name>_spec.lua, busted, no services
#   integration/<name>  spec/integration/<name>_spec.lua, busted, with the
#                       `services` fixture (private PostgreSQL + Redis)
#   services/start      fixture set-up: spec/support/services start
#   services/stop       fixture clean-up: stops them and deletes their data
#   package/deb         spec/support/check-package: cpack -G DEB and its contents
#   docs/openapi        tools/openapi/check (npm packages of tools/openapi)
#   c/<name>            spec/c/test_<name>.c (added by CMakeLists.txt); a C test
#                       whose source mentions SGW_TEST_DATABASE_URL or
#                       SGW_TEST_REDIS_URL gets the fixture and those variables
#   c/layers            tools/layers: which host file calls which, read from the
#                       object files, against the layers of host/LAYERS
#
# Every test runs from the repository root. Servers, sgw instances and
# databases get free ports and unique names, so `ctest -j2` is safe.
# Labels: `ctest -L unit`, `-L integration`, `-L c`, `-L package`, `-L docs`.

find_program(SGW_LUA NAMES lua5.4)
find_program(SGW_BUSTED NAMES busted)
find_program(SGW_BASH NAMES bash)
foreach(tool SGW_LUA SGW_BUSTED SGW_BASH)
  if(NOT ${tool})
    message(WARNING "${tool} not found (install lua5.4, lua-busted and bash, or run scripts/dev test): the Lua specs will fail")
  endif()
endforeach()
if(NOT SGW_LUA)
  set(SGW_LUA lua5.4)
endif()
if(NOT SGW_BUSTED)
  set(SGW_BUSTED busted)
endif()
if(NOT SGW_BASH)
  set(SGW_BASH bash)
endif()

set(SGW_TEST_SERVICES_DIR ${CMAKE_BINARY_DIR}/test-services)
set(SGW_TEST_SERVICES_ENV ${CMAKE_BINARY_DIR}/test-services.env)
set(SGW_RUN_WITH_SERVICES ${SGW_BASH} ${CMAKE_SOURCE_DIR}/spec/support/run-integration ${SGW_TEST_SERVICES_ENV})

# busted under Lua 5.4 whatever `lua` points to; modules from lib/ and spec/support/.
set(SGW_BUSTED_COMMAND ${SGW_LUA} ${SGW_BUSTED}
  --lpath=./lib/?.lua --lpath=./lib/?/init.lua --lpath=./spec/support/?.lua
  -o utfTerminal)

# ---------------------------------------------------------------- services fixture
add_test(NAME services/start
  COMMAND ${SGW_BASH} ${CMAKE_SOURCE_DIR}/spec/support/services start ${SGW_TEST_SERVICES_DIR}
          --env-file ${SGW_TEST_SERVICES_ENV}
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME services/stop
  COMMAND ${SGW_BASH} ${CMAKE_SOURCE_DIR}/spec/support/services stop ${SGW_TEST_SERVICES_DIR} --purge
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(services/start PROPERTIES FIXTURES_SETUP services TIMEOUT 180 LABELS services)
set_tests_properties(services/stop PROPERTIES FIXTURES_CLEANUP services TIMEOUT 120 LABELS services)

# ---------------------------------------------------------------- Lua specs
file(GLOB SGW_UNIT_SPECS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/spec/unit/*_spec.lua)
foreach(spec ${SGW_UNIT_SPECS})
  get_filename_component(file ${spec} NAME)
  string(REGEX REPLACE "_spec\\.lua$" "" name ${file})
  add_test(NAME unit/${name}
    COMMAND ${SGW_BUSTED_COMMAND} spec/unit/${file}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(unit/${name} PROPERTIES TIMEOUT 120 LABELS unit)
endforeach()

# Specs whose time goes to a browser or to a newcomer's walk-through (the web
# pages in Chromium, the demo, the client examples) run in the normal build
# only: what they add under ASan+UBSan is minutes, not C paths that the other
# integration specs do not already drive. So do the specs of Meta policy in
# Lua whose time goes to waiting on the fake Graph API's clocks and to
# starting CLI processes (comment sync passes, token health, Instagram's
# containers and quota): the host calls they make (PostgreSQL, Redis, the
# HTTP client against the fake, the CLI) are the ones comments, moderation,
# platforms, publishing_faults and meta_subscriptions drive under the
# sanitizers. The bench's fake Graph API runs no sgw at all.
set(SGW_NORMAL_BUILD_ONLY_SPECS workspace workspace_comments workspace_posts sandbox_pages demo examples
  bench_fake_graph sync token_health instagram_publishing)

file(GLOB SGW_INTEGRATION_SPECS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/spec/integration/*_spec.lua)
foreach(spec ${SGW_INTEGRATION_SPECS})
  get_filename_component(file ${spec} NAME)
  string(REGEX REPLACE "_spec\\.lua$" "" name ${file})
  if(SGW_SANITIZE AND name IN_LIST SGW_NORMAL_BUILD_ONLY_SPECS)
    continue()
  endif()
  add_test(NAME integration/${name}
    COMMAND ${SGW_RUN_WITH_SERVICES} ${SGW_BUSTED_COMMAND} spec/integration/${file}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(integration/${name} PROPERTIES
    FIXTURES_REQUIRED services
    ENVIRONMENT "SGW_BUILD_DIR=${CMAKE_BINARY_DIR};SGW_REPO_ROOT=${CMAKE_SOURCE_DIR}"
    TIMEOUT 600
    LABELS integration)
endforeach()

# ---------------------------------------------------------------- package
# The Debian package (packaging/package.cmake), from the normal build only: an
# ASan binary is not what ships.
if(NOT SGW_SANITIZE)
  add_test(NAME package/deb
    COMMAND ${SGW_BASH} ${CMAKE_SOURCE_DIR}/spec/support/check-package ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(package/deb PROPERTIES TIMEOUT 120 LABELS package)
endif()

# ---------------------------------------------------------------- docs
#   docs/openapi  tools/openapi/check: lib/openapi.json validates against the
#                 OpenAPI 3.1 schema and openapi-typescript's types of it
#                 compile with tsc --strict (npm packages: scripts/dev runs
#                 npm ci in tools/openapi)
add_test(NAME docs/openapi
  COMMAND ${SGW_BASH} ${CMAKE_SOURCE_DIR}/tools/openapi/check ${CMAKE_BINARY_DIR}/openapi
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(docs/openapi PROPERTIES TIMEOUT 120 LABELS docs)

# ---------------------------------------------------------------- C tests
# CMakeLists.txt registers c/<name> as the bare executable. Those that use the
# services run through run-integration instead (so they see the env file written
# at test time): the launcher is prepended to the test command by CMake, via
# TEST_LAUNCHER (CMake >= 3.29) or CROSSCOMPILING_EMULATOR (older; used for
# add_test whether or not cross-compiling). SGW_C_TESTS_NEEDING_SERVICES may
# name more (e.g. -DSGW_C_TESTS_NEEDING_SERVICES=test_jobs).
file(GLOB SGW_C_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/spec/c/test_*.c)
foreach(src ${SGW_C_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  if(NOT TEST c/${name} OR NOT TARGET ${name})
    continue()
  endif()
  # Re-run the configure step when a C test changes, so the scan below stays true.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${src})
  file(READ ${src} body)
  set(labels c)
  if(body MATCHES "SGW_TEST_(DATABASE|REDIS)_URL" OR name IN_LIST SGW_C_TESTS_NEEDING_SERVICES)
    if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.29)
      set_property(TARGET ${name} PROPERTY TEST_LAUNCHER ${SGW_RUN_WITH_SERVICES})
    else()
      set_property(TARGET ${name} PROPERTY CROSSCOMPILING_EMULATOR ${SGW_RUN_WITH_SERVICES})
    endif()
    set_tests_properties(c/${name} PROPERTIES FIXTURES_REQUIRED services)
    list(APPEND labels services)
  endif()
  set_tests_properties(c/${name} PROPERTIES
    ENVIRONMENT "SGW_BUILD_DIR=${CMAKE_BINARY_DIR};SGW_REPO_ROOT=${CMAKE_SOURCE_DIR}"
    TIMEOUT 300
    LABELS "${labels}")
endforeach()

# ---------------------------------------------------------------- layers
# Reads the object files, so it checks the build it runs in.
find_program(SGW_PYTHON3 NAMES python3)
if(NOT SGW_PYTHON3)
  set(SGW_PYTHON3 python3)
endif()
add_test(NAME c/layers
  COMMAND ${SGW_PYTHON3} ${CMAKE_SOURCE_DIR}/tools/layers ${CMAKE_BINARY_DIR} ${CMAKE_NM}
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(c/layers PROPERTIES TIMEOUT 60 LABELS c)
