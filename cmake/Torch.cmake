# LibTorch comes from the pinned PyPI torch wheel installed by scripts/setup.sh.
# Point CMAKE_PREFIX_PATH (or CHATBENCH_PYTHON) at it; we ask Python for the prefix otherwise.
if(NOT Torch_DIR)
  if(NOT CHATBENCH_PYTHON)
    if(DEFINED ENV{CHATBENCH_VENV})
      set(CHATBENCH_PYTHON "$ENV{CHATBENCH_VENV}/bin/python")
    else()
      set(CHATBENCH_PYTHON "$ENV{HOME}/.cache/chatbench/venv/bin/python")
    endif()
  endif()
  execute_process(
    COMMAND "${CHATBENCH_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _chatbench_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_QUIET RESULT_VARIABLE _chatbench_torch_rc)
  if(_chatbench_torch_rc EQUAL 0)
    list(APPEND CMAKE_PREFIX_PATH "${_chatbench_torch_prefix}")
  endif()
  # Caffe2's config derives the NVRTC short hash from Python when it has one.
  set(Python_EXECUTABLE "${CHATBENCH_PYTHON}")
endif()

if(CHATBENCH_TORCH_OPTIONAL) # the fuzz harnesses: those that need no Torch build without it
  find_package(Torch QUIET)
else()
  find_package(Torch REQUIRED)
endif()
if(Torch_FOUND)
  message(STATUS "LibTorch ${Torch_VERSION} from ${Torch_DIR}")
endif()
