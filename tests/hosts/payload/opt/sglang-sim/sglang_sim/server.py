"""A simulated SGLang server: real argument parsing, real log lines, fake GPUs.

Started exactly like SGLang (``python -m sglang.launch_server ...`` or
``sglang serve ...``).  Parses its flags against the flag catalog of the version
it claims to be (/opt/sglang-sim/catalogs/<version>.json), applies the silent
adjustments SGLang makes that matter to a deployer, prints SGLang's startup log
lines in their real format and order (one forked scheduler process per TP rank,
each holding simulated GPU memory), and serves SGLang's HTTP endpoints.

Behaviour knobs: /etc/sglang-sim.toml ([sglang_sim] table) and SGLANG_SIM_*
environment variables (SGLANG_SIM_FAIL, SGLANG_SIM_STARTUP_S, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import hmac
import importlib.metadata
import json
import logging
import mmap
import os
import random
import select
import shlex
import signal
import socket
import sys
import threading
import time
import tomllib
import traceback
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, "/opt/sglang-sim")
import sim_gpu

CATALOG_DIR = Path(os.environ.get("SGLANG_SIM_CATALOGS", "/opt/sglang-sim/catalogs"))
SETTINGS_FILE = Path(os.environ.get("SGLANG_SIM_CONFIG", "/etc/sglang-sim.toml"))
PKG = "/root/ml-env/lib/python3.11/site-packages"

DEFAULT_SETTINGS = {
    "startup_s": 2.5,
    "tokens_per_s": 200.0,
    "release_delay_s": 2.0,
    "failure": "",
    "fail_when_arg": [],
    "crash_after_ready_s": 2.0,
    "slow_start_s": 20.0,
    "hang_at": "load",
    "mem_mib": 0,
    "orphan_children": False,
    "resolve_hang_s": 0.0,
    "broken_import": "",
    "ready_endpoint": True,
    "log_wrapper": "",
    "sigterm_drain": False,
}

VERSION = importlib.metadata.version("sglang")
V = tuple(int(x) for x in VERSION.split(".")[:3] if x.isdigit())
# HTTP endpoints and their answers, by release (read in the released wheels; paths under sglang/srt/).
# GET /ping answers 200 with no body on the API server and on node_rank >= 1's dummy health server
# in every release read (0.5.11..0.5.23): entrypoints/http_server.py, utils/common.py.
READY_ENDPOINT = (0, 5, 20)  # entrypoints/http_server.py: GET /ready, 200 or 503, no body; utils/auth.py exempts it
LOADS_SNAPSHOT = (0, 5, 13)  # entrypoints/v1_loads.py, managers/load_snapshot.py: rows from LoadSnapshot.to_dict,
#                              no dp_rank_count, aggregate or num_total_reqs
LOADS_ROW_TIMESTAMP = (0, 5, 16)  # managers/load_snapshot.py _CORE_KEYS: each row leads with its timestamp
LOADS_ACCELERATOR = (0, 5, 17)  # entrypoints/v1_loads.py: accelerator, num_accelerators; load_snapshot.py: every
#                                 struct field a row key (num_active_tokens, total_prefill_*, decode_moments)
LOADS_PREALLOC_READY = (0, 5, 20)  # managers/load_snapshot.py: num_prealloc_ready_tokens
RESOLVE_ONCE = (0, 5, 19)  # server_args.py ServerArgs.resolve_once: launch_server/engine.py resolve, not __post_init__
SERVER_INFO_FRONTEND = (0, 5, 21)  # entrypoints/http_server.py server_info: "frontend": "python"
LANGUAGE_ONLY_ALONE = (0, 5, 13)  # server_args.py _handle_encoder_disaggregation (0.5.19: arg_groups/
#                                   pd_disaggregation_hook.py): --language-only without --encoder-urls is logged,
#                                   no longer refused
# The traceback frames' lines, by release (the newest first; read in the wheels). Frames not listed here keep
# the lines the simulation has always printed.
LAUNCH_SERVER_LINE = (((0, 5, 20), 81), ((0, 5, 19), 73), ((0, 5, 18), 67), ((0, 5, 16), 68), ((0, 5, 14), 67),
                      ((0, 0, 0), 66))  # launch_server.py <module>: prepare_server_args(sys.argv[1:])
PREPARE_LINE = (((0, 5, 23), 710), ((0, 5, 22), 696), ((0, 5, 21), 621), ((0, 5, 20), 732), ((0, 5, 19), 4284),
                ((0, 5, 18), 9804), ((0, 5, 17), 9380), ((0, 5, 16), 8224), ((0, 5, 15), 7161), ((0, 5, 14), 7232),
                ((0, 5, 13), 8009), ((0, 5, 12), 7757), ((0, 0, 0), 7299))  # server_args.py prepare_server_args
PREPARE_ASSIGNS = (0, 5, 20)  # server_args.py: "server_args = ServerArgs.from_cli_args(raw_args)" (was "return ...")
SERVE_FRAME = (((0, 5, 23), ("_run_llm", 105)), ((0, 5, 21), ("_run_llm", 99)), ((0, 5, 18), ("_run_llm", 98)),
               ((0, 5, 16), ("serve", 139)), ((0, 0, 0), ("serve", 126)))  # cli/serve.py
CLI_MAIN_LINE = (((0, 5, 21), 51), ((0, 0, 0), 40))  # cli/main.py main: serve(args, extra_argv)
SCHEDULER_LINES = (((0, 5, 23), (6362, 6368)), ((0, 5, 22), (6128, 6134)), ((0, 5, 21), (6082, 6088)),
                   ((0, 5, 20), (5841, 5857)), ((0, 5, 19), (5584, 5600)), ((0, 5, 18), (5048, 5064)),
                   ((0, 5, 17), (4931, 4947)), ((0, 5, 16), (4623, 4639)), ((0, 5, 15), (4313, 4329)),
                   ((0, 5, 14), (4211, 4227)), ((0, 5, 13), (4046, 4062)), ((0, 5, 12), (4025, 4041)),
                   ((0, 0, 0), (3918, 3934)))  # managers/scheduler.py run_scheduler_process: Scheduler(, event loop
SCHEDULER_ONE_LINE = (0, 5, 21)  # scheduler.py: "scheduler = Scheduler(server_args, port_args)" on one line
# A start that runs out of GPU memory: the frames between run_scheduler_process's `Scheduler(` and the
# raise, as each release runs them (read in the wheels, 0.5.11 .. 0.5.23; paths under sglang/srt/): each row
# is (file, function, its source line, its line in 0.5.11, 0.5.12, ..., 0.5.23), None where that release
# does not pass through it. Releases before 0.5.11 take 0.5.11's lines, later ones 0.5.23's.
# - Weights (model_loader/loader.py): DefaultModelLoader.load_model builds the model on the GPU in
#   _initialize_model, so a model too large for the GPU runs out of memory there (in the model's own layers,
#   frames the simulation leaves out); 0.5.16+ reach it through load_model_utils.load_model_with_memory_saver.
# - KV cache (model_executor/pool_configurator.py): DefaultPoolConfigurator.calculate_pool_sizes builds a
#   MemoryPoolConfig with no mem_fraction_static, whose __post_init__ (through the dataclass's generated
#   __init__, "<string>": one line per field, then __post_init__) raises "Not enough memory. Please try to
#   increase --mem-fraction-static." with no "Current value" (set only on a config that was built). 0.5.11..
#   0.5.13 reach it from ModelRunner.initialize (model_runner_kv_cache_mixin.py), 0.5.14 and 0.5.15 from
#   Scheduler.init_memory_pools through ModelRunner.alloc_memory_pool and the mixin, 0.5.16+ through
#   mem_cache/kv_cache_configurator.py KVCacheConfigurator.configure.
# - Graph capture: CudaGraphRunner (0.5.11..0.5.13, from ModelRunner.init_device_graphs), then
#   runner/decode_cuda_graph_runner.py DecodeCudaGraphRunner (0.5.14+, Scheduler.init_all_cuda_graphs;
#   0.5.16+ through model_runner_components/cuda_graph_setup.py capture_decode_graph) wrap the capture's
#   RuntimeError in "Exception: Capture cuda graph failed: ..." and CUDA_GRAPH_CAPTURE_FAILED_MSG
#   (cuda_graph_runner.py, then runner_backend_utils/__init__.py from 0.5.14).
WEIGHTS_OOM_FRAMES = (
    ("sglang/srt/managers/scheduler.py", "__init__", "self.init_model_worker()",
     (432, 437, 427, 436, 423, 431, 498, 518, 553, 576, 557, 563, 568)),
    ("sglang/srt/managers/scheduler.py", "init_model_worker", "self.init_tp_model_worker()",
     (693, 718, 817, 861, 866, 847, 976, 995, 1049, 1100, 1092, 1100, 1130)),
    ("sglang/srt/managers/scheduler.py", "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)",
     (648, 673, 772, 782, 787, 771, 899, 921, 971, 1022, 1004, 1009, 1033)),
    ("sglang/srt/managers/tp_worker.py", "__init__", "self._init_model_runner()",
     (260, 262, 262, 269, 273, 308, 333, 337, 351, 351, 315, 318, 319)),
    ("sglang/srt/managers/tp_worker.py", "_init_model_runner", "self._model_runner = ModelRunner(",
     (345, 347, 347, 378, 385, 424, 451, 466, 483, 483, 477, 480, 487)),
    ("sglang/srt/model_executor/model_runner.py", "__init__", "self.initialize(pre_model_load_memory)",
     (508, 535, 571, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/model_runner.py", "__init__", "self.initialize()",
     (None, None, None, 572, 581, 357, 399, 436, 459, 469, 463, 488, 499)),
    ("sglang/srt/model_executor/model_runner.py", "initialize", "self.load_model()",
     (625, 655, 679, 693, 702, 567, 597, 630, 651, 663, 654, 705, 715)),
    ("sglang/srt/model_executor/model_runner.py", "load_model", "self.model = self.loader.load_model(",
     (1380, 1465, 1364, 1423, 1510, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/model_runner.py", "load_model", "loaded = load_model_with_memory_saver(",
     (None, None, None, None, None, 935, 1053, 1099, 1165, 1203, 1225, 1293, 1312)),
    ("sglang/srt/model_executor/model_runner_components/load_model_utils.py", "load_model_with_memory_saver", "model = loader.load_model(",
     (None, None, None, None, None, 230, 294, 321, 307, 339, 339, 346, 346)),
    ("sglang/srt/model_loader/loader.py", "load_model", "model = _initialize_model(",
     (698, 718, 737, 758, 761, 790, 810, 985, 949, 982, 997, 1012, 1014)),
    ("sglang/srt/model_loader/loader.py", "_initialize_model", "return model_class(**kwargs)",
     (286, 292, 296, 317, 320, 321, 330, 345, 297, 304, 307, None, None)),
    ("sglang/srt/model_loader/loader.py", "_initialize_model", "model = model_class(**kwargs)",
     (None, None, None, None, None, None, None, None, None, None, None, 308, 309)),
)
# the scheduler's start down to ModelRunner.__init__, where the KV cache and the graphs began
# until 0.5.13
TO_MODEL_RUNNER = (
    ("sglang/srt/managers/scheduler.py", "__init__", "self.init_model_worker()",
     (432, 437, 427, 436, 423, 431, 498, 518, 553, 576, 557, 563, 568)),
    ("sglang/srt/managers/scheduler.py", "init_model_worker", "self.init_tp_model_worker()",
     (693, 718, 817, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/managers/scheduler.py", "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)",
     (648, 673, 772, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/managers/tp_worker.py", "__init__", "self._init_model_runner()",
     (260, 262, 262, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/managers/tp_worker.py", "_init_model_runner", "self._model_runner = ModelRunner(",
     (345, 347, 347, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/model_runner.py", "__init__", "self.initialize(pre_model_load_memory)",
     (508, 535, 571, None, None, None, None, None, None, None, None, None, None)),
)
KV_OOM_FRAMES = (
    *TO_MODEL_RUNNER,
    ("sglang/srt/model_executor/model_runner.py", "initialize", "self.init_memory_pool(pre_model_load_memory)",
     (733, 749, 784, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/managers/scheduler.py", "init_model_worker", "self.init_memory_pools()",
     (None, None, None, 868, 870, 851, 981, 1002, 1056, 1107, 1099, 1107, 1137)),
    ("sglang/srt/managers/scheduler.py", "init_memory_pools", "self.init_target_memory_pool()",
     (None, None, None, 838, 843, 824, 953, 968, 1022, 1073, 1065, 1070, 1100)),
    ("sglang/srt/managers/scheduler.py", "init_target_memory_pool", "self.tp_worker.alloc_memory_pool()",
     (None, None, None, 834, 839, 820, 949, 964, 1018, 1069, 1061, 1066, None)),
    ("sglang/srt/managers/scheduler.py", "init_target_memory_pool", "self.tp_worker.alloc_memory_pool(",
     (None, None, None, None, None, None, None, None, None, None, None, None, 1090)),
    ("sglang/srt/managers/tp_worker.py", "alloc_memory_pool", "self.model_runner.alloc_memory_pool(memory_pool_config)",
     (None, None, None, 329, 335, 374, 399, 403, 420, 420, 403, 406, None)),
    ("sglang/srt/managers/tp_worker.py", "alloc_memory_pool", "self.model_runner.alloc_memory_pool(",
     (None, None, None, None, None, None, None, None, None, None, None, None, 409)),
    ("sglang/srt/model_executor/model_runner.py", "alloc_memory_pool", "self.init_memory_pool(self.pre_model_load_memory)",
     (None, None, None, 813, 846, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/model_runner_kv_cache_mixin.py", "init_memory_pool", "self.memory_pool_config = self._resolve_memory_pool_config(",
     (762, 902, 974, 1084, 1329, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/model_runner_kv_cache_mixin.py", "_resolve_memory_pool_config", "config = configurator.calculate_pool_sizes(available_bytes, page_size)",
     (741, 881, 953, 1063, 1307, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/model_runner.py", "alloc_memory_pool", "result = self.kv_cache_configurator.configure(",
     (None, None, None, None, None, 734, 775, 805, 878, 898, 886, 960, 982)),
    ("sglang/srt/mem_cache/kv_cache_configurator.py", "configure", "config = self._resolve_memory_pool_config(pre_model_load_memory)",
     (None, None, None, None, None, 227, 247, 284, 304, 330, 370, 436, 476)),
    ("sglang/srt/mem_cache/kv_cache_configurator.py", "_resolve_memory_pool_config", "config = self.config_from_budget(available_bytes)",
     (None, None, None, None, None, 1670, 1783, 1937, 2169, 2327, 2356, 2864, 3183)),
    ("sglang/srt/mem_cache/kv_cache_configurator.py", "config_from_budget", "config = configurator.calculate_pool_sizes(",
     (None, None, None, None, None, 1691, 1804, 1958, 2190, 2348, 2377, 2885, 3204)),
    ("sglang/srt/model_executor/pool_configurator.py", "calculate_pool_sizes", "return MemoryPoolConfig(max_total_num_tokens=max_total_num_tokens)",
     (175, 187, 187, 227, 275, 292, 326, 424, 436, 543, 562, 624, 647)),
    ("<string>", "__init__", "",
     (8, 12, 12, 12, 12, 12, 12, 12, 13, 13, 14, 14, 14)),
    ("sglang/srt/model_executor/pool_configurator.py", "__post_init__", "raise RuntimeError(msg)",
     (44, 56, 56, 61, 66, 67, 67, 77, 86, 95, 93, 96, 99)),
)
GRAPH_OOM_FRAMES = (
    *TO_MODEL_RUNNER,
    ("sglang/srt/model_executor/model_runner.py", "initialize", "self.init_device_graphs()",
     (771, 791, 834, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/model_runner.py", "init_device_graphs", "self.graph_runner = graph_runners[self.device](self)",
     (2792, 2958, 2908, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/cuda_graph_runner.py", "__init__", "raise Exception(",
     (716, 738, 628, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/managers/scheduler.py", "init_model_worker", "self.init_all_cuda_graphs()",
     (None, None, None, 872, 874, 854, 985, 1006, 1060, 1111, 1103, 1111, 1146)),
    ("sglang/srt/managers/scheduler.py", "init_all_cuda_graphs", "self.tp_worker.init_cuda_graphs()",
     (None, None, None, 855, 860, 841, 970, 989, 1043, 1094, 1086, 1094, 1124)),
    ("sglang/srt/managers/tp_worker.py", "init_cuda_graphs", "self.model_runner.init_cuda_graphs(",
     (None, None, None, 351, 357, 396, 423, 426, 443, 443, 425, 428, 435)),
    ("sglang/srt/model_executor/model_runner.py", "init_cuda_graphs", "self.init_decode_cuda_graph()",
     (None, None, None, 913, 950, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/model_runner.py", "init_decode_cuda_graph", "self.decode_cuda_graph_runner = graph_runners[self.device](self)",
     (None, None, None, 2583, 2688, None, None, None, None, None, None, None, None)),
    ("sglang/srt/model_executor/model_runner.py", "init_cuda_graphs", "capture = capture_cuda_graphs(",
     (None, None, None, None, None, 839, 944, 985, 1062, 1100, 1100, 1178, 1192)),
    ("sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py", "capture_cuda_graphs", "decode = capture_decode_graph(model_runner=model_runner)",
     (None, None, None, None, None, 106, 144, 179, 249, 269, 412, 413, 437)),
    ("sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py", "capture_decode_graph", "runner = graph_runners[model_runner.device](model_runner)",
     (None, None, None, None, None, 333, 447, 475, 568, 588, 737, None, None)),
    ("sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py", "capture_decode_graph", "runner = GraphRunnerCls(model_runner)",
     (None, None, None, None, None, None, None, None, None, None, None, 737, 780)),
    ("sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", "__init__", "raise Exception(",
     (None, None, None, 355, 365, 409, 417, 463, 491, 466, 492, 517, 602)),
)
# A refusal while the arguments are resolved (read in the wheels, 0.5.11 .. 0.5.23; rows as the OOM tables'):
# until 0.5.18 ServerArgs.from_cli_args builds the dataclass, whose generated __init__ ("<string>": one line
# per field, then __post_init__) resolves in __post_init__ (0.5.18: through _run_resolution_pipeline); from
# 0.5.19 prepare_server_args returns the raw record and launch_server.py run_server resolves it in
# ServerArgs.resolve_once, through arg_groups/pipeline.py run_resolution_pipeline (each hook through
# resolution_hooks.py run_hook from 0.5.20).
RESOLUTION_FRAMES = (
    ("sglang/srt/server_args.py", "from_cli_args", "return cls(**{attr: getattr(args, attr) for attr in attrs})",
     (6685, 7141, 7284, 6506, 6391, 7348, 8470, 8928, None, None, None, None, None)),
    ("<string>", "__init__", "", (371, 384, 399, 407, 426, 449, 461, 475, None, None, None, None, None)),
    ("sglang/srt/server_args.py", "__post_init__", "self._run_resolution_pipeline()",
     (None, None, None, None, None, None, None, 3586, None, None, None, None, None)),
    ("sglang/launch_server.py", "run_server", "server_args.resolve_once()", (None, None, None, None, None, None, None, None, 21, 29, 29, 29, 29)),
    ("sglang/srt/server_args.py", "resolve_once", "run_resolution_pipeline(self)",
     (None, None, None, None, None, None, None, None, 3697, 281, 246, 276, 277)),
)
LAUNCH_RUN_SERVER_LINE = (((0, 5, 20), 84), ((0, 0, 0), 76))  # launch_server.py <module>: run_server(server_args)
SSL_FRAMES = (  # ServerArgs._handle_ssl_validation (0.5.19+: arg_groups/serving_hook.py handle_ssl_validation)
    ("sglang/srt/server_args.py", "__post_init__", "self._handle_ssl_validation()",
     (795, 869, 906, 2469, 2671, 2917, 3474, None, None, None, None, None, None)),
    ("sglang/srt/server_args.py", "_run_resolution_pipeline", "self._handle_ssl_validation()",
     (None, None, None, None, None, None, None, 3630, None, None, None, None, None)),
    ("sglang/srt/arg_groups/pipeline.py", "run_resolution_pipeline", "handle_ssl_validation(server_args)",
     (None, None, None, None, None, None, None, None, 121, None, None, None, None)),
    ("sglang/srt/arg_groups/pipeline.py", "run_resolution_pipeline", "run_hook(handle_ssl_validation, server_args)",
     (None, None, None, None, None, None, None, None, None, 134, 108, 116, 125)),
    ("sglang/srt/arg_groups/resolution_hooks.py", "run_hook", "step(server_args)",
     (None, None, None, None, None, None, None, None, None, 198, 134, 135, 139)),
)
SSL_RAISE = {  # the raise for each missing file: (_handle_ssl_validation, then handle_ssl_validation from 0.5.19)
    "ssl_keyfile": (961, 1052, 1101, 2669, 2905, 3219, 3888, 4054, 54, 55, 54, 69, 69),
    "ssl_certfile": (966, 1057, 1106, 2674, 2910, 3224, 3893, 4059, 59, 60, 59, 74, 74),
    "ssl_ca_certs": (971, 1062, 1111, 2679, 2915, 3229, 3898, 4064, 64, 65, 64, 79, 79),
}
ENCODER_FRAMES = (  # --language-only without --encoder-urls, refused until 0.5.12 (LANGUAGE_ONLY_ALONE)
    ("sglang/srt/server_args.py", "__post_init__", "self._handle_encoder_disaggregation()",
     (888, 982, None, None, None, None, None, None, None, None, None, None, None)),
    ("sglang/srt/server_args.py", "_handle_encoder_disaggregation", "raise ValueError(",
     (3809, 4116, None, None, None, None, None, None, None, None, None, None, None)),
)
FRAMES_READ = ((0, 5, 11), (0, 5, 23))  # the releases the tables above hold, one column each
# max_running_requests, resolved from the KV cache's size once it is known (model_runner_kv_cache_mixin.py
# _resolve_max_num_reqs, 0.5.16+ mem_cache/kv_cache_configurator.py resolve_max_num_reqs; no release's
# server_args.py sets it without the flag, but for speculative decoding's 48). The rule, in every release read:
# without the flag, min(max(min(int(tokens / context_len * 512), 4096), 2048), tokens // 2) per DP worker:
# 4096 for any model whose pool holds 8+ full contexts (0.5.11 on an H200: 3064347 tokens, context 8192, 4096).
# With it, flag // dp_size (DP attention only) capped by that estimate, or from 0.5.14 by tokens // 2 with a
# warning when it cuts; 0.5.23 keeps at least 1.
MRR_REQUEST_CAP = (0, 5, 14)
MRR_LOGGED = ((0, 5, 13), (0, 5, 14))  # 0.5.13 alone logs "Max concurrent requests (per dp worker) ..."
CRASH_DIAGNOSTICS = (0, 5, 13)  # TokenizerManager.dump_requests_before_crash's py-spy and coredump

# The release where each line of a start or a stop took its wording (read in the released wheels;
# paths under sglang/srt/). Before each, the 0.5.10/0.5.11 wording.
KV_DTYPE_INLINE = (0, 5, 13)  # mem_cache/memory_pool.py: "KV Cache is allocated. dtype: ..."; no "Using KV cache dtype"
TREE_CACHE_LINE = (0, 5, 13)  # mem_cache/registry.py create_tree_cache: "Tree cache initialized: ..."
KILL_TREE_LINE = (0, 5, 13)  # utils/common.py kill_process_tree: "kill_process_tree called: ..."
PER_PHASE_GRAPHS = (0, 5, 14)  # model_executor/model_runner.py: "Capture target prefill|decode CUDA graph", prefill first
TOKENS_PER_REQ = (0, 5, 16)  # model_runner_components/cuda_graph_setup.py: num_tokens_per_req (was num_tokens_per_bs)
STARTUP_TIMINGS = (0, 5, 17)  # entrypoints/engine.py _set_startup_time: "Engine startup timings (s): ..."
MM_IPC_AUTO = ((0, 5, 17), (0, 5, 18))  # server_args.py: 0.5.17 alone picks cuda_ipc for multimodal features
SERVER_ARGS_DICT = (0, 5, 19)  # entrypoints/engine.py: server_args={resolved_dict()} (was the dataclass repr)
INIT_PARALLEL = (0, 5, 21)  # distributed/bootstrap.py: "Init parallel ends." (was "Init torch distributed", mem usage)
DECODE_BS_AT_END = (0, 5, 22)  # cuda_graph_setup.py: bs= on the decode graph's end line (was on its begin line)
TOKENS_PER = "num_tokens_per_req" if V >= TOKENS_PER_REQ else "num_tokens_per_bs"
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")
# launch_server.py: the line of its warnings.warn, by release
LAUNCH_WARNING_LINES = (((0, 5, 20), 71), ((0, 5, 19), 63), ((0, 5, 18), 57), ((0, 5, 16), 56), ((0, 5, 14), 55),
                        ((0, 0, 0), 54))


def by_release(table: tuple) -> object:
    """The value of a ((release, value), ...) table (newest first) for the release simulated."""
    return next(value for since, value in table if since <= V)


def read_frames(table: tuple) -> list[tuple[str, int, str, str]]:
    """A traceback's frames from a table of rows (file, function, source, its line in each release read)
    for the release simulated: the rows of the releases it passes through."""
    at = min(max(V, FRAMES_READ[0]), FRAMES_READ[1])[2] - FRAMES_READ[0][2]
    return [(file if file.startswith("<") else f"{PKG}/{file}", lines[at], func, src)
            for file, func, src, lines in table if lines[at] is not None]


def resolve_max_num_reqs(args: dict, tokens: int) -> tuple[int, int | None]:
    """The scheduler's max_running_requests for a KV pool of `tokens`, and the value asked for
    per DP worker where the release may cut it (see MRR_REQUEST_CAP)."""
    estimated = max(min(int(tokens / max(1, int(args.get("context_length") or 1)) * 512), 4096), 2048)
    asked = args.get("max_running_requests")
    if asked is None:
        return min(estimated, tokens // 2), None
    dp = int(args.get("dp_size") or 1) if args.get("enable_dp_attention") else 1
    per_worker = int(asked) // dp
    if V < MRR_REQUEST_CAP:
        return min(per_worker, estimated), None
    if V >= (0, 5, 23):
        per_worker = max(1, per_worker)
    return min(per_worker, tokens // 2), per_worker


def prefill_graph_tokens(args: dict) -> list[int]:
    """The token counts 0.5.14+ capture a prefill graph for (server_args.py
    _generate_prefill_cuda_graph_batch_sizes, 0.5.19+ arg_groups/cuda_graph_hook.py; the same steps in
    every release read) up to its max_bs: --cuda-graph-max-bs-prefill, else chunked_prefill_size (the
    simulation has no MLA model, whose default differs), capped by --max-total-tokens and, for any model
    path holding "llama-2", by 4096 (server_args.py / arg_groups/memory_hook.py: "For Llama2 series
    models"; it catches /opt/models/llama-20b too, as 0.5.17 did on the H100: 50 sizes up to 4096, and
    58 up to 8192 for llama-8b)."""
    max_bs = args.get("cuda_graph_max_bs_prefill")
    if max_bs is None:
        max_bs = int(args.get("chunked_prefill_size") or 8192)
        if args.get("max_total_tokens") is not None:
            max_bs = min(max_bs, int(args["max_total_tokens"]))
        if "llama-2" in str(args.get("model_path") or "").lower():
            max_bs = min(max_bs, 4096)
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, int(max_bs) + 1, 512)]
    return [n for n in sizes if n <= int(max_bs)]


def crash_diagnostics_on() -> bool:
    """Either variable true, as SGLang's EnvBool reads it (both default to true)."""
    return any(os.environ.get(name, "true").lower() in ("true", "1", "yes", "y")
               for name in ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH"))


# ------------------------------------------------------------------------ logging


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


_RANK_PREFIX = ""
_WRAPPER = ""  # settings' log_wrapper: "" or "pylog" (a launcher re-logs every line it reads)


def _out(fd: int, text: str) -> None:
    """Write lines as SGLang does, or each inside a launcher's Python logging record
    (`2025-03-07 23:50:27,531 - sglang_launcher - INFO - <the line>`)."""
    if _WRAPPER == "pylog":
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now * 1000) % 1000:03d}"
        text = "".join(f"{stamp} - sglang_launcher - INFO - {line}" for line in text.splitlines(keepends=True))
    os.write(fd, text.encode())


def log(msg: str) -> None:
    """SGLang's format: [%Y-%m-%d %H:%M:%S{ TPk}] message (no level name)."""
    _out(2, f"[{_now()}{_RANK_PREFIX}] {msg}\n")


class _Stderr:
    """stderr for Python's logging, through _out (so a log_wrapper wraps these lines too)."""

    def write(self, text: str) -> None:
        _out(2, text)

    def flush(self) -> None:
        pass


def engine_logger(args: dict) -> logging.Logger:
    """SGLang's main process logs through Python's logging: configure_logger's basicConfig on
    stderr (`[%(asctime)s] %(message)s`, the level from --log-level), then the module logger of
    sglang.srt.entrypoints.engine, which prints the server_args line (an f-string)."""
    logging.basicConfig(level=getattr(logging, str(args.get("log_level") or "info").upper(), logging.INFO),
                        format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S", stream=_Stderr(),
                        force=True)
    return logging.getLogger("sglang.srt.entrypoints.engine")


def uv(msg: str, level: str = "INFO", stamped: bool = True) -> None:
    """uvicorn's format as SGLang sets it (utils/common.py set_uvicorn_logging_configs, 0.5.11 and
    0.5.17 on a GPU alike): [%Y-%m-%d %H:%M:%S] INFO:     message. `stamped=False`: uvicorn's own
    format, which the dummy health server of node_rank >= 1 keeps."""
    stamp = f"[{_now()}] " if stamped else ""
    _out(2, f"{stamp}{(level + ':').ljust(9)} {msg}\n")


def access(client: str, line: str, status: int) -> None:
    phrase = {
        200: "OK",
        401: "Unauthorized",
        404: "Not Found",
        503: "Service Unavailable",
        400: "Bad Request",
    }.get(status, "")
    _out(1, f'[{_now()}] INFO:     {client} - "{line}" {status} {phrase}\n')


def emit_raw(text: str) -> None:
    _out(2, text)


# ----------------------------------------------------------------------- settings


def load_settings() -> dict:
    s = dict(DEFAULT_SETTINGS)
    with contextlib.suppress(FileNotFoundError):
        s.update(tomllib.loads(SETTINGS_FILE.read_text()).get("sglang_sim", {}))
    env = os.environ
    if env.get("SGLANG_SIM_FAIL") is not None:
        s["failure"] = env["SGLANG_SIM_FAIL"]
        s["fail_when_arg"] = []
    for key in (
        "startup_s",
        "tokens_per_s",
        "release_delay_s",
        "crash_after_ready_s",
        "slow_start_s",
    ):
        if env.get(f"SGLANG_SIM_{key.upper()}"):
            s[key] = float(env[f"SGLANG_SIM_{key.upper()}"])
    if env.get("SGLANG_SIM_FAIL_WHEN_ARG"):
        s["fail_when_arg"] = [env["SGLANG_SIM_FAIL_WHEN_ARG"]]
    if isinstance(s["fail_when_arg"], str):
        s["fail_when_arg"] = [s["fail_when_arg"]] if s["fail_when_arg"] else []
    return s


def _arg_present(argv: list[str], want: str) -> bool:
    """`--flag=value`, `--flag value` or a bare `--flag` in argv."""
    if want in argv:
        return True
    if "=" in want:
        flag, value = want.split("=", 1)
        for i, a in enumerate(argv):
            if a == flag and i + 1 < len(argv) and argv[i + 1] == value:
                return True
    return False


def active_failure(settings: dict, argv: list[str]) -> str:
    f = settings.get("failure") or ""
    if f and all(_arg_present(argv, w) for w in settings["fail_when_arg"]):
        return f
    return ""


# ------------------------------------------------------------------------ parsing


def human_readable_int(value: str) -> int:
    v = value.strip().lower()
    mult = {"k": 1000, "m": 1000**2, "g": 1000**3}
    if v and v[-1] in mult:
        return int(float(v[:-1]) * mult[v[-1]])
    return int(v)


def json_list_type(value: str) -> list:
    return json.loads(value)


def loads(value: str) -> object:
    return json.loads(value)


def nullable_str(value: str) -> str | None:
    return None if value.lower() in ("none", "null", "") else value


def parse_cuda_graph_backend_arg(value: str) -> str:
    return value


def parse_cuda_graph_config_arg(value: str) -> str:
    return value


TYPES = {
    "int": int,
    "float": float,
    "str": str,
    "json.loads": loads,
    "loads": loads,
    "human_readable_int": human_readable_int,
    "json_list_type": json_list_type,
    "nullable_str": nullable_str,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}


def load_catalog() -> dict:
    return json.loads((CATALOG_DIR / f"{VERSION}.json").read_text())


def build_parser(catalog: dict) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang serve", allow_abbrev=True)
    seen: set[str] = set()
    for f in catalog["flags"]:
        opts = [o for o in f["flags"] if o not in seen]
        if not opts:
            continue
        kw: dict = {"dest": f["field"], "default": f.get("default")}
        if f.get("boolean_optional"):
            pos = [o for o in opts if not any(o == "--no-" + p[2:] for p in opts)]
            kw["action"] = argparse.BooleanOptionalAction
            opts = pos
        elif (
            f.get("store_true")
            or (not f.get("takes_value", True) and not f.get("nargs"))
            or (f.get("nargs") in ("0", 0))
        ):
            kw["action"] = "store_true"
            kw["default"] = bool(f.get("default") or False)
        else:
            t = f.get("argparse_type")
            if t:
                kw["type"] = TYPES.get(t, str)
            if f.get("choices"):
                kw["choices"] = f["choices"]
            if f.get("nargs") not in (None, "0", 0):
                kw["nargs"] = f["nargs"]
        try:
            parser.add_argument(*opts, **kw)
        except (argparse.ArgumentError, ValueError):
            continue
        seen.update(opts)
        if kw.get("action") is argparse.BooleanOptionalAction:
            seen.update("--no-" + o[2:] for o in opts)
    return parser


def merge_config(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """SGLang's `--config FILE` (0.5.3 and later, ConfigArgumentMerger): one file, *.yaml or *.yml,
    a mapping whose keys become `--KEY VALUE` words ahead of the command line (which wins)."""
    if "--config" not in argv or V < (0, 5, 3):
        return argv
    at = [i for i, word in enumerate(argv) if word == "--config"]
    if len(at) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    if at[0] == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = Path(argv[at[0] + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {path.suffix}")
    if not path.exists():
        raise ValueError(f"Config file not found: {path}")
    import yaml  # PyYAML, as SGLang itself imports it

    with open(path) as handle:
        data = yaml.safe_load(handle) or {}
    if not isinstance(data, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    store_true = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
    words: list[str] = []
    for key, value in data.items():
        if isinstance(value, bool):
            if key.replace("-", "_") not in store_true:
                words += [f"--{key}", str(value).lower()]
            elif value:
                words.append(f"--{key}")
        elif isinstance(value, list):
            words += [f"--{key}", *map(str, value)] if value else []
        elif isinstance(value, dict):
            words += [f"--{key}", json.dumps(value)]
        else:
            words += [f"--{key}", str(value)]
    return words + argv[: at[0]] + argv[at[0] + 2 :]


_CONFIG_FRAME = (
    f"{PKG}/sglang/srt/utils/server_args_config_parser.py",
    82,
    "merge_config_with_args",
    "config_data = self._parse_yaml_config(config_file_path)",
)


# ---------------------------------------------------------------------- resolution


def _traceback_exit(frames: list[tuple[str, int, str, str]], final: str, code: int = 1) -> None:
    out = ["Traceback (most recent call last):\n"]
    for file, line, func, src in frames:
        out.append(f'  File "{file}", line {line}, in {func}\n')
        if src:
            out.append(f"    {src}\n")
    out.append(final + "\n")
    emit_raw("".join(out))
    sys.exit(code)


class Refusal(Exception):
    """SGLang refusing a launch while it resolves its arguments: the server prints it as a
    traceback and exits 1; `sglang.srt.server_args` (the host check's entry points) raises it
    as the exception SGLang raises."""

    TYPES = {"ValueError": ValueError, "AssertionError": AssertionError, "OSError": OSError,
             "RuntimeError": RuntimeError}

    def __init__(self, frames: list[tuple[str, int, str, str]], final: str) -> None:
        super().__init__(final)
        self.frames, self.final = frames, final

    def as_sglang_error(self) -> BaseException:
        name, _, message = self.final.partition(": ")
        return self.TYPES.get(name, RuntimeError)(message)


def _refuse(frames: list[tuple[str, int, str, str]], final: str) -> None:
    raise Refusal(frames, final)


def _prepare_frame() -> tuple[str, int, str, str]:
    """The traceback frame where argument resolution starts (prepare_server_args)."""
    src = ("server_args = " if V >= PREPARE_ASSIGNS else "return ") + "ServerArgs.from_cli_args(raw_args)"
    return (f"{PKG}/sglang/srt/server_args.py", by_release(PREPARE_LINE), "prepare_server_args", src)


def _entry_frames(entry: str, resolving: bool = False) -> list[tuple[str, int, str, str]]:
    """The frames down to prepare_server_args, or (`resolving`, 0.5.19+) to run_server's call."""
    run = resolving and V >= RESOLVE_ONCE
    if entry == "launch_server":
        return [
            ("<frozen runpy>", 198, "_run_module_as_main", ""),
            ("<frozen runpy>", 88, "_run_code", ""),
            (f"{PKG}/sglang/launch_server.py", by_release(LAUNCH_RUN_SERVER_LINE), "<module>",
             "run_server(server_args)") if run else (
                f"{PKG}/sglang/launch_server.py",
                by_release(LAUNCH_SERVER_LINE),
                "<module>",
                "server_args = prepare_server_args(sys.argv[1:])",
            ),
        ]
    func, line = by_release(SERVE_FRAME)
    argv = "list(request.argv)" if func == "_run_llm" else "dispatch_argv"
    return [
        ("/root/ml-env/bin/sglang", 8, "<module>", "sys.exit(main())"),
        (f"{PKG}/sglang/cli/main.py", by_release(CLI_MAIN_LINE), "main", "serve(args, extra_argv)"),
        (f"{PKG}/sglang/cli/serve.py", line + 1, func, "run_server(server_args)") if run else
        (f"{PKG}/sglang/cli/serve.py", line, func, f"server_args = prepare_server_args({argv})"),
    ]


def _resolving_frames(entry: str, *tables: tuple) -> list[tuple[str, int, str, str]]:
    """A refusal raised while ServerArgs resolves: the entry point, prepare_server_args (0.5.18 and
    before) or run_server (0.5.19+), the resolution's frames (RESOLUTION_FRAMES), then `tables`'."""
    prepare = [] if V >= RESOLVE_ONCE else [_prepare_frame()]
    return _entry_frames(entry, resolving=True) + prepare + read_frames(RESOLUTION_FRAMES) + [
        frame for table in tables for frame in read_frames(table)]


def model_config(path: str, entry: str) -> dict:
    p = Path(path)
    if not p.is_dir():
        hf = (
            "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
            f"'namespace/repo_name': '{path}'. Use `repo_type` argument if needed."
        )
        emit_raw(
            "Traceback (most recent call last):\n"
            f'  File "{PKG}/transformers/configuration_utils.py", line 708, in _get_config_dict\n'
            "    resolved_config_file = cached_file(\n"
            f'  File "{PKG}/huggingface_hub/utils/_validators.py", line 154, in validate_repo_id\n'
            "    raise HFValidationError(\n"
            f"{hf}\n\nDuring handling of the above exception, another exception occurred:\n\n"
        )
        _refuse(
            _resolving_frames(entry)  # the frames below, down to get_config, not re-read in the wheels
            + [
                (f"{PKG}/sglang/srt/utils/hf_transformers_utils.py", 390, "get_config", "raise e"),
                (
                    f"{PKG}/transformers/configuration_utils.py",
                    731,
                    "_get_config_dict",
                    "raise OSError(",
                ),
            ],
            f"OSError: Can't load the configuration of '{path}'. If you were trying to load it "
            "from 'https://huggingface.co/models', make sure you don't have a local directory "
            f"with the same name. Otherwise, make sure '{path}' is the correct path to a "
            "directory containing a config.json file",
        )
    cfg_file = p / "config.json"
    if not cfg_file.exists():
        _refuse(
            _entry_frames(entry)
            + [
                (
                    f"{PKG}/transformers/configuration_utils.py",
                    731,
                    "_get_config_dict",
                    "raise OSError(",
                )
            ],
            f"OSError: {path} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{path}/tree/None' for available files.",
        )
    return json.loads(cfg_file.read_text())


def is_multimodal(cfg: dict) -> bool:
    arch = (cfg.get("architectures") or [""])[0]
    return (
        "ForConditionalGeneration" in arch
        or "VL" in arch
        or "vision_config" in cfg
        or "Omni" in arch
    )


def resolve(args: dict, cfg: dict, gpu: dict, entry: str, early: list[str]) -> list[dict]:
    """Apply SGLang's own adjustments in place; return what changed (field, old, new, reason)."""
    changes: list[dict] = []

    def change(field: str, new: object, reason: str) -> None:
        old = args.get(field)
        if old != new:
            args[field] = new
            changes.append({"field": field, "old": old, "new": new, "reason": reason})

    arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
    mem_total = int(gpu["memory_mib"])
    cc = float(gpu.get("compute_capability", "9.0"))
    if args.get("tokenizer_path") is None:
        args["tokenizer_path"] = args["model_path"]
    if args.get("served_model_name") is None:
        args["served_model_name"] = args["model_path"]

    # GPU-dependent defaults
    if args.get("mem_fraction_static") is None:
        args["mem_fraction_static"] = 0.88 if mem_total > 80_000 else 0.85
    if args.get("chunked_prefill_size") is None:
        args["chunked_prefill_size"] = (
            4096 if mem_total < 60_000 else (8192 if mem_total < 160_000 else 16384)
        )
    if args.get("attention_backend") is None:
        args["attention_backend"] = "flashinfer" if cc < 9 else ("fa3" if cc < 10 else "trtllm_mha")
    if "sampling_backend" in args and args.get("sampling_backend") is None:
        args["sampling_backend"] = "flashinfer"
    if args.get("page_size") is None:
        args["page_size"] = 1
    if "cuda_graph_max_bs" in args and args.get("cuda_graph_max_bs") is None:
        args["cuda_graph_max_bs"] = 32 if mem_total < 60_000 else 256
    derived = int(cfg.get("max_position_embeddings")
                  or (cfg.get("text_config") or {}).get("max_position_embeddings") or 262144)
    asked = args.get("context_length")
    allow = os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "").lower() in ("1", "true")
    if asked is not None and int(asked) > derived and not allow:
        # ModelConfig._derive_context_length: only the model's files can tell
        _refuse(
            _resolving_frames(entry)  # the frames below, down to ModelConfig, not re-read in the wheels
            + [
                (f"{PKG}/sglang/srt/configs/model_config.py", 1314, "_derive_context_length",
                 "raise ValueError("),
            ],
            f"ValueError: Warning: User-specified context_length ({asked}) is greater than the "
            f"derived context_length ({derived}). This may lead to incorrect model outputs or CUDA "
            "errors. Note that the derived context_length may differ from max_position_embeddings "
            "in the model's config. To allow overriding this maximum, set the env var "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        )
    if asked is None:
        args["context_length"] = derived

    # ServerArgs._handle_ssl_validation (0.5.10+): the files must exist on the host, before load
    for name, what in (("ssl_keyfile", "SSL key file"), ("ssl_certfile", "SSL certificate file"),
                       ("ssl_ca_certs", "SSL CA certificates file")):
        path = args.get(name)
        if V >= (0, 5, 10) and path and not os.path.isfile(path):
            raiser = ("sglang/srt/arg_groups/serving_hook.py", "handle_ssl_validation") if V >= RESOLVE_ONCE \
                else ("sglang/srt/server_args.py", "_handle_ssl_validation")
            _refuse(
                _resolving_frames(entry, SSL_FRAMES, ((*raiser, "raise ValueError(", SSL_RAISE[name]),)),
                f"ValueError: {what} not found: '{path}'. Please check the --{name.replace('_', '-')} path.",
            )

    # speculative decoding
    algo = args.get("speculative_algorithm")
    if algo:
        if algo.upper() == "NEXTN":
            change("speculative_algorithm", "EAGLE", "NEXTN is an alias of EAGLE")
        steps = args.get("speculative_num_steps")
        topk = args.get("speculative_eagle_topk")
        draft = args.get("speculative_num_draft_tokens")
        if args["speculative_algorithm"] in ("EAGLE", "EAGLE3", "STANDALONE"):
            if args.get("max_running_requests") is None:
                change("max_running_requests", 48, "speculative decoding")
                early.append(
                    "Max running requests is reset to 48 for speculative decoding. "
                    "You can override this by explicitly setting --max-running-requests."
                )
            if steps is None:
                if topk is not None or draft is not None:
                    _refuse(
                        _resolving_frames(entry)  # the frames below not re-read in the wheels
                        + [
                            (
                                f"{PKG}/sglang/srt/server_args.py",
                                3054,
                                "_handle_speculative_decoding",
                                "assert (",
                            )
                        ],
                        "AssertionError",
                    )
                auto = (5, 4, 8) if "Llama" in arch or "Grok" in arch else (3, 1, 4)
                change("speculative_num_steps", auto[0], "auto-chosen")
                change("speculative_eagle_topk", auto[1], "auto-chosen")
                change("speculative_num_draft_tokens", auto[2], "auto-chosen")
            elif topk == 1 and draft != steps + 1:
                early.append(
                    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                    "when speculative_eagle_topk == 1"
                )
                change(
                    "speculative_num_draft_tokens",
                    steps + 1,
                    "topk == 1 forces draft tokens = steps + 1",
                )
            if args.get("enable_mixed_chunk"):
                change("enable_mixed_chunk", False, "not supported with speculative decoding")

    # piecewise / prefill CUDA graph
    if "disable_piecewise_cuda_graph" in args:
        if not args.get("enforce_piecewise_cuda_graph") and is_multimodal(cfg):
            change(
                "disable_piecewise_cuda_graph",
                True,
                "multimodal / VLM model (_handle_piecewise_cuda_graph)",
            )
    elif "cuda_graph_backend_prefill" in args:
        explicit = (
            args.get("cuda_graph_backend_prefill") is not None
            or args.get("disable_prefill_cuda_graph")
            or args.get("disable_cuda_graph")
        )
        if not explicit and is_multimodal(cfg):
            change("cuda_graph_backend_prefill", "disabled", "multimodal model")
            early.append(
                "Breakable CUDA graph is incompatible with multimodal models; "
                "disabling prefill CUDA graph."
            )

    # encoder disaggregation
    if args.get("language_only") and not args.get("encoder_urls"):
        if V < LANGUAGE_ONLY_ALONE:
            _refuse(
                _resolving_frames(entry, ENCODER_FRAMES),
                "ValueError: requires at least one encoder urls to be set via --encoder-urls",
            )
        early.append(
            "--language-only is set without --encoder-urls. Encoders are expected to register "
            "dynamically via the EncoderBootstrapServer."
        )
    early.extend(mm_transport_lines(args))
    return changes


def mm_transport_lines(args: dict) -> list[str]:
    """What 0.5.17's ServerArgs says of the multimodal feature transport: on one CUDA node it picks
    cuda_ipc by itself, for text models too (the H100's journals; 0.5.18 keeps it opt-in)."""
    if not MM_IPC_AUTO[0] <= V < MM_IPC_AUTO[1]:
        return []
    asked = args.get("mm_feature_transport")
    single = int(args.get("nnodes") or 1) == 1 and (args.get("disaggregation_mode") or "null") == "null"
    if args.get("encoder_only") or asked == "cpu" or (asked is None and not single):
        return []
    lines = [] if asked else [
        "Multimodal feature transport auto-resolved to cuda_ipc (single-node CUDA). Pass "
        "--mm-feature-transport=cpu to opt out."
    ]
    mib = int(os.environ.get("SGLANG_MM_FEATURE_CACHE_MB") or 1024)
    cached = os.environ.get("SGLANG_USE_IPC_POOL_HANDLE_CACHE", "1").lower() in ("1", "true", "yes", "y")
    return [
        *lines,
        f"Using CUDA IPC for multimodal features: reserving up to {mib} MiB on base GPU "
        f"{int(args.get('base_gpu_id') or 0)} across {int(args.get('tokenizer_worker_num') or 1)} "
        "tokenizer worker(s). This reduces KV cache headroom; a full pool falls back to CPU transport.",
        f"CUDA IPC pool-handle caching is {'enabled' if cached else 'disabled'}. It reuses mappings to the "
        "existing bounded pool without reserving another pool; set SGLANG_USE_IPC_POOL_HANDLE_CACHE=0 to "
        "disable it.",
    ]


FIELD_ORDER_FILE = Path(__file__).with_name("field_order.json")


def field_order() -> list[str]:
    """ServerArgs' field order in the release simulated, or the nearest earlier one read (field_order.json:
    the ServerArgs dataclass body of server_args.py in 0.5.11..0.5.19, arg_groups/field_order.py's
    POSITIONAL_FIELD_ORDER from 0.5.20; a field declared twice keeps its first place). Empty before 0.5.11."""
    with contextlib.suppress(OSError, ValueError):
        orders = json.loads(FIELD_ORDER_FILE.read_text())
        known = sorted((tuple(int(x) for x in k.split(".")), k) for k in orders)
        fit = [k for rel, k in known if rel <= V]
        if fit:
            return orders[fit[-1]]
    return []


def args_repr(args: dict) -> str:
    # ServerArgs' order; a field the release does not declare stays after those it does
    order = [k for k in field_order() if k in args] or [k for k in ("model_path", "tokenizer_path") if k in args]
    keys = order + [k for k in args if k not in set(order)]
    # Like SGLang, api_key and admin_api_key are printed with the rest (0.5.23 redacts only the
    # watermark keys; 0.5.1x prints the dataclass as it is).
    if V >= SERVER_ARGS_DICT:
        return "server_args=" + repr({k: args[k] for k in keys})
    return "server_args=ServerArgs(" + ", ".join(f"{k}={args[k]!r}" for k in keys) + ")"


# ------------------------------------------------------------------- GPU placement


def visible_gpus(gpu_count: int) -> list[int]:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return list(range(gpu_count))
    out = []
    uuids = {sim_gpu.gpu_uuid(i): i for i in range(gpu_count)}
    for tok in cvd.split(","):
        tok = tok.strip()
        if tok.isdigit() and int(tok) < gpu_count:
            out.append(int(tok))
        elif tok in uuids:
            out.append(uuids[tok])
        else:
            break  # CUDA stops at the first invalid entry
    return out


# ---------------------------------------------------------------------- scheduler


def set_proc_name(name: str) -> None:
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def set_pdeathsig() -> None:
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def gb(mib: float) -> str:
    return f"{mib / 1024:.2f}"


class Rank:
    """One scheduler process (forked)."""

    def __init__(self, rank: int, ctx: dict) -> None:
        self.rank = rank
        self.ctx = ctx
        self.args = ctx["args"]
        self.s = ctx["settings"]
        self.failure = ctx["failure"]
        self.gpu_total = int(ctx["gpu"]["memory_mib"])
        self.reserved = int(ctx["gpu"].get("reserved_mib", 615))
        self.gpu_index: int | None = None
        self.used = 0
        self.slot = 0
        self.initialized = False  # Scheduler() done; in the event loop
        self.started = time.monotonic()
        self.timings = {"load_weight": 0.0, "kv_cache_allocation": 0.0, "scheduler_e2e": 0.0}
        self.graph_s = dict.fromkeys(GRAPH_PHASES, 0.0)  # model_executor/graph_memory_usage.py's keys

    def phase_sleep(self, frac: float) -> None:
        time.sleep(max(0.0, self.ctx["startup_s"] * frac) + self.rank * 0.003)

    def avail(self) -> float:
        if self.gpu_index is None:
            return 0
        return sim_gpu.free_mib(self.gpu_index, exclude_pid=None)

    def hold(self, mib: int) -> None:
        self.used = mib
        sim_gpu.update(os.getpid(), mib)

    def hit_exception(
        self,
        frames: list[tuple[str, int, str, str]],
        final: str,
        *,
        serving: bool = False,
        quit_after_s: float = 0.0,
    ) -> None:
        """Scheduler hit an exception: log it, SIGQUIT the parent, wait to be killed.
        `serving`: raised in the event loop (after init), not in Scheduler().
        `quit_after_s`: the parent learns of it this much later (other ranks print first)."""
        tb = ["Traceback (most recent call last):\n"]
        base = [
            (
                f"{PKG}/sglang/srt/managers/scheduler.py",
                by_release(SCHEDULER_LINES)[1 if serving else 0],
                "run_scheduler_process",
                "scheduler.run_event_loop()" if serving
                else "scheduler = Scheduler(server_args, port_args)" if V >= SCHEDULER_ONE_LINE
                else "scheduler = Scheduler(",
            ),
        ]
        for file, line, func, src in base + frames:
            tb.append(f'  File "{file}", line {line}, in {func}\n')
            if src:
                tb.append(f"    {src}\n")
        tb.append(final)
        log("Scheduler hit an exception: " + "".join(tb))
        time.sleep(quit_after_s)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.ctx["parent"], signal.SIGQUIT)
        time.sleep(30)
        os._exit(1)

    def weights_from_daemon(self) -> bool:
        """weight_cache_mode client (ipc_loader.py): the GPU's daemon socket, found by its UUID
        (0.5.19+) or by the rank (0.5.17, 0.5.18); absent, SGLang says so and loads from disk."""
        if self.args.get("weight_cache_mode") != "client":
            return False
        from sglang_sim.weight_daemon import TENSORS, keyed_by_uuid, paths

        by_rank = not keyed_by_uuid()

        sock_path, ready_path = paths(sim_gpu.gpu_uuid(self.gpu_index), self.rank)
        if not os.path.exists(sock_path):
            log(f"[IpcModelLoader] Daemon socket not found at {sock_path}.")
            log("[IpcModelLoader] Weight cache not available or config mismatch, falling back to disk load")
            return False
        pid = "0"
        with contextlib.suppress(OSError), open(ready_path) as ready:
            pid = next((line[4:].strip() for line in ready if line.startswith("pid=")), "0")
        tp = int(self.args.get("tp_size") or 1)
        quant = self.args.get("quantization") or ""  # 0.5.17 on the H100: "quant=, " unquantized
        log(f"[IpcModelLoader] Requesting weights from daemon at {sock_path} with config: "
            f"model={self.args['model_path']}, arch={self.ctx['arch']}, tp={tp}/{self.rank}, quant={quant}, "
            "dtype=torch.bfloat16")
        if by_rank:  # as 0.5.17 said it on the H100 (tests/fixtures/h200-real/weight-cache)
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as asked:
                asked.connect(sock_path)  # the daemon logs that it serves the engine
            log(f"[IpcModelLoader] Fetched {TENSORS} IPC handles from daemon in 0.00s")
            log(f"[IpcModelLoader] Zero-copy: mapped {TENSORS} tensors (0 new post-quant), time=0.028s")
        else:
            log("[IpcModelLoader] Fetched 291 tensors from daemon (transport=torch_ipc) in 0.31s")
        log(f"[IpcModelLoader] Started daemon-liveness watchdog for pid={pid}")
        log(f"[IpcModelLoader] Loaded model via IPC (mode=client), total={0.06 if by_rank else 0.42}s")
        return True

    # 0.5.11 on an H100, a shard the unit's user could not open (tests/fixtures/h200-real/strict/)
    SHARD_FRAMES = (
        ("sglang/srt/model_executor/model_runner.py", 1380, "load_model", "self.model = self.loader.load_model("),
        ("sglang/srt/model_loader/loader.py", 704, "load_model", "self.load_weights_and_postprocess("),
        ("sglang/srt/model_loader/loader.py", 713, "load_weights_and_postprocess", "model.load_weights(weights)"),
        ("sglang/srt/model_loader/loader.py", 588, "_get_all_weights",
         "yield from self._get_weights_iterator(primary_weights)"),
        ("sglang/srt/model_loader/weight_utils.py", 971, "_load_file",
         'with safetensors.safe_open(st_file, framework="pt", device="cpu") as f:'),
    )

    def read_shards(self) -> None:
        """Open each safetensors shard as the real loader does: one this process may not read is
        "No such file or directory" (safetensors says so for EACCES too); one whose bytes end before
        its header says is "incomplete metadata" (a partial download)."""
        folder = str(self.args.get("model_path") or "")
        if not os.path.isdir(folder):
            return
        for name in sorted(n for n in os.listdir(folder) if n.endswith(".safetensors")):
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as f:
                    head = f.read(8)
                    size = os.fstat(f.fileno()).st_size
            except OSError:
                final = f"FileNotFoundError: No such file or directory: {path}\n"
            else:
                declared = int.from_bytes(head, "little") if len(head) == 8 else size
                if 8 + declared <= size:
                    continue
                final = ("safetensors._safetensors_rust.SafetensorError: Error while deserializing header: "
                         "incomplete metadata, file not fully covered\n")
            frames = [(f"{PKG}/{file}", line, func, src) for file, line, func, src in self.SHARD_FRAMES]
            self.hit_exception(frames, final)

    def peer_lost(self) -> None:
        """Another node of the process group went away: what torch.distributed raises in the
        scheduler (gloo, the CPU group that carries requests to the other ranks)."""
        peer = bytes(self.ctx["peer"]).split(b"\0", 1)[0].decode() or "[unknown]:0"
        self.hit_exception(
            [
                (
                    f"{PKG}/sglang/srt/managers/scheduler.py",
                    1105,
                    "event_loop_overlap",
                    "recv_reqs = self.recv_requests()",
                ),
                (
                    f"{PKG}/sglang/srt/managers/scheduler.py",
                    1298,
                    "recv_requests",
                    "recv_reqs = broadcast_pyobj(",
                ),
                (
                    f"{PKG}/sglang/srt/utils/common.py",
                    1152,
                    "broadcast_pyobj",
                    "dist.broadcast(tensor_size, src=src, group=dist_group)",
                ),
                (
                    f"{PKG}/torch/distributed/c10d_logger.py",
                    81,
                    "wrapper",
                    "return func(*args, **kwargs)",
                ),
                (
                    f"{PKG}/torch/distributed/distributed_c10d.py",
                    2730,
                    "broadcast",
                    "work.wait()",
                ),
            ],
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
            f"Connection closed by peer {peer}\n",
            serving=self.initialized,
        )

    def nccl_init_failure(self, local: int, gpu: int) -> None:
        """NCCL cannot connect while the TP group forms: the last rank fails with the cause (NCCL's
        own WARN line, then DistBackendError), the others a moment later with gloo's consequence."""
        port = 49823
        init = [
            (f"{PKG}/sglang/srt/managers/scheduler.py", 305, "__init__", "self.tp_worker = TpModelWorker("),
            (f"{PKG}/sglang/srt/managers/tp_worker.py", 237, "__init__", "self._model_runner = ModelRunner("),
            (f"{PKG}/sglang/srt/model_executor/model_runner.py", 372, "__init__",
             "min_per_gpu_memory = self.init_torch_distributed()"),
            (f"{PKG}/sglang/srt/model_executor/model_runner.py", 729, "init_torch_distributed",
             "initialize_model_parallel("),
            (f"{PKG}/sglang/srt/distributed/parallel_state.py", 1612, "initialize_model_parallel",
             "_TP = init_model_parallel_group("),
        ]
        if local == int(self.args.get("tp_size") or 1) // int(self.ctx.get("nnodes", 1)) - 1:
            emit_raw(f"{socket.gethostname()}:{os.getpid()}:{os.getpid()} [{gpu}] misc/socket.cc:484 NCCL WARN "
                     f"socketStartConnect: Connect to 127.0.0.1<{port}> failed : Connection refused\n")
            self.hit_exception(
                [*init, (f"{PKG}/sglang/srt/distributed/device_communicators/pynccl.py", 115, "__init__",
                         "self.comm: ncclComm_t = self.nccl.ncclCommInitRank(")],
                "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:"
                "317, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
                "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device "
                f"error. \nLast error:\nsocketStartConnect: Connect to 127.0.0.1<{port}> failed : Connection refused\n",
                quit_after_s=0.6,
            )
        time.sleep(0.2)
        self.hit_exception(
            [*init, (f"{PKG}/torch/distributed/distributed_c10d.py", 4622, "barrier", "work.wait()")],
            f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            f"[127.0.0.1]:{port}\n",
        )

    def oom(self, tried_mib: float, free: float | None = None) -> str:
        """torch's CUDA OOM message; `free` None = a forced failure (report a nearly full GPU)."""
        capacity = self.gpu_total - self.reserved
        if free is None:
            free = 312.0
            in_use = capacity - free
        else:
            in_use = self.used
        tried_mib = max(tried_mib, free + 64)
        return (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried_mib / 1024:.2f} "
            f"GiB. GPU {self.slot} has a total capacity of {capacity / 1024:.2f} GiB of which "
            f"{free:.2f} MiB is free. Including non-PyTorch memory, this process has "
            f"{in_use / 1024:.2f} GiB memory in use. Of the allocated memory "
            f"{max(0.0, in_use / 1024 - 0.12):.2f} GiB is allocated by PyTorch, and "
            "120.53 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory "
            "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )

    def run(self) -> None:
        global _RANK_PREFIX
        a, s = self.args, self.s
        tp = int(a.get("tp_size") or 1)
        _RANK_PREFIX = f" TP{self.rank}" if tp > 1 else ""
        set_proc_name(f"sglang::scheduler_TP{self.rank}" if tp > 1 else "sglang::scheduler")
        if not s.get("orphan_children"):
            set_pdeathsig()
        visible = visible_gpus(int(self.ctx["gpu"]["count"]))
        # multi-node: this node runs ranks first_rank .. first_rank + tp/nnodes - 1
        local = self.rank - int(self.ctx.get("first_rank", 0))
        slot = int(a.get("base_gpu_id") or 0) + local * int(a.get("gpu_id_step") or 1)
        mem_frac = float(a["mem_fraction_static"])
        target = int(s.get("mem_mib") or mem_frac * self.gpu_total)
        weights = int(self.ctx["weights_mib"])
        graph_mib = min(900, max(64, int(target * 0.03)))
        self.phase_sleep(0.05)
        log(f"Init {'parallel' if V >= INIT_PARALLEL else 'torch distributed'} begin.")
        if slot >= len(visible):
            self.hit_exception(
                [
                    (
                        f"{PKG}/torch/cuda/__init__.py",
                        567,
                        "set_device",
                        "torch._C._cuda_setDevice(device)",
                    )
                ],
                "RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be "
                "asynchronously reported at some other API call, so the stacktrace below might be "
                "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with "
                "`TORCH_USE_CUDA_DSA` to enable device-side assertions.\n",
            )
        if self.failure == "nccl_init" and tp > 1:
            self.nccl_init_failure(local, visible[slot])
        self.gpu_index = visible[slot]
        self.slot = slot
        sim_gpu.register(
            os.getpid(), [self.gpu_index], 0, "python3", float(s.get("release_delay_s", 2.0))
        )
        self.hold(min(520, target))
        self.phase_sleep(0.05)
        t0 = time.monotonic()
        if int(self.ctx.get("nnodes", 1)) > 1:
            # the process group forms once every node has reached dist_init_addr
            signal.signal(signal.SIGUSR1, lambda *_: self.peer_lost())
            if not os.read(self.ctx["dist_r"], 1):
                os._exit(0)
        # 0.5.11 on an H200: "Init torch distributed ends. elapsed=0.22 s, mem usage=0.09 GB"
        elapsed = f"elapsed={time.monotonic() - t0 + 0.1:.2f} s"
        if V >= INIT_PARALLEL:
            log(f"Init parallel ends. {elapsed}")
        else:
            log(f"Init torch distributed ends. {elapsed}, mem usage=0.09 GB")
        avail0 = self.avail()
        log(f"Load weight begin. avail mem={gb(avail0)} GB")
        if self.failure == "hang" and s.get("hang_at", "load") == "load":
            while True:
                time.sleep(3600)
        t0 = time.monotonic()
        mapped = self.weights_from_daemon()  # weight_cache_mode client: the daemon holds them
        if not mapped:
            self.phase_sleep(0.3)
            self.read_shards()
        if not mapped and (self.failure == "cuda_oom" or avail0 < weights):
            self.hit_exception(
                read_frames(WEIGHTS_OOM_FRAMES),
                self.oom(
                    max(1024.0, weights / 8),
                    None if self.failure == "cuda_oom" else max(0.0, avail0 - self.used),
                )
                + "\n",
            )
        if not mapped:
            self.hold(self.used + weights)
        arch = self.ctx["arch"]
        self.timings["load_weight"] = time.monotonic() - t0
        # mapped weights are the daemon's memory: 0.5.17's client says "mem usage=0.00 GB"
        log(
            f"Load weight end. elapsed={self.timings['load_weight']:.2f} s, type={arch}, "
            f"avail mem={gb(self.avail())} GB, mem usage={gb(0 if mapped else weights)} GB."
        )
        self.phase_sleep(0.05)
        kv = target - self.used - graph_mib - (weights if mapped else 0)  # the daemon's weights count (0.5.19+)
        if self.failure == "kv_cache_oom" or kv <= 0:
            self.hit_exception(
                read_frames(KV_OOM_FRAMES),
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
            )
        tokens = int(kv * 1024 * 1024 / self.ctx["kv_bytes_per_token"])
        self.ctx["tokens"] = tokens
        mrr, asked = resolve_max_num_reqs(a, tokens)
        self.ctx["max_running_requests"] = mrr
        if MRR_LOGGED[0] <= V < MRR_LOGGED[1]:
            log(f"Max concurrent requests (per dp worker) from the finalized token capacity: max_num_reqs={mrr}.")
        if asked is not None and mrr < asked:
            log(f"max_running_requests was reduced from the requested {asked} to {mrr} (per dp worker) "
                "due to the available KV cache capacity.")
        t0 = time.monotonic()
        self.hold(self.used + kv)
        self.log_kv_cache(tokens, kv)
        self.timings["kv_cache_allocation"] = time.monotonic() - t0
        if V >= (0, 5, 11):  # seen on 0.5.11 and 0.5.2x
            log(f"Memory pool end. avail mem={gb(self.avail())} GB")
        self.capture_graphs(graph_mib, target)
        if self.rank == 0:
            log(
                f"max_total_num_tokens={tokens}, chunked_prefill_size={a['chunked_prefill_size']}, "
                f"max_prefill_tokens={a.get('max_prefill_tokens') or 16384}, "
                f"max_running_requests={mrr}, context_len={a['context_length']}, "
                f"available_gpu_mem={gb(self.avail())} GB"
            )
        if V >= TREE_CACHE_LINE:  # every rank, once its model worker is up
            self.log_tree_cache()
        self.timings["scheduler_e2e"] = time.monotonic() - self.started

    def log_kv_cache(self, tokens: int, kv: float) -> None:
        sizes = f"#tokens: {tokens}, K size: {gb(kv / 2)} GB, V size: {gb(kv / 2)} GB"
        if V >= KV_DTYPE_INLINE:
            log(f"KV Cache is allocated. dtype: torch.bfloat16, {sizes}")
        else:  # 0.5.11 names the dtype on a line of its own (tests/fixtures/h200-real/)
            log("Using KV cache dtype: torch.bfloat16")
            log(f"KV Cache is allocated. {sizes}")

    def log_tree_cache(self) -> None:
        a = self.args
        impl = "ChunkCache" if a.get("disable_radix_cache") else (
            "HiRadixCache" if a.get("enable_hierarchical_cache") else "RadixCache")
        log(f"Tree cache initialized: source=default impl={impl} hybrid_swa=False hybrid_ssm=False "
            f"hierarchical={bool(a.get('enable_hierarchical_cache'))} streaming_wrapped=False")

    CAPTURE_BS = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256)

    def capture_graphs(self, graph_mib: int, target: int) -> None:
        a = self.args
        if a.get("disable_cuda_graph"):
            return
        spec = bool(a.get("speculative_algorithm"))
        max_bs = a.get("cuda_graph_max_bs") or a.get("cuda_graph_max_bs_decode") or 32
        bs = [b for b in self.CAPTURE_BS if b <= int(max_bs)] or [1]
        over = self.avail() < 0  # mem fraction beyond the GPU
        fail = self.failure == "graph_capture" or over or target > self.gpu_total - self.reserved
        per = 0.25 / (3 if spec else 2)  # of startup_s, for each capture
        if V >= PER_PHASE_GRAPHS:
            self.capture_prefill(graph_mib, per)
            self.capture_decode(graph_mib, bs, per, fail, spec)
            if spec:
                self.capture_draft(graph_mib, bs, per)
        else:
            self.capture_legacy(graph_mib, bs, per, fail, spec)

    def fail_capture(self) -> None:
        if V >= PER_PHASE_GRAPHS:  # model_executor/runner_backend_utils/__init__.py
            sol = (
                "Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
                "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
                "(Not recommended. Huge performance loss)\n"
            )
        else:
            sol = (
                "Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
                "3. disable torch compile by not using --enable-torch-compile\n"
                "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge "
                "performance loss)\n"
            )
        sol += (
            "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
        )
        # the runner's `raise Exception(f"Capture cuda graph failed: {e}\n...")`: str() of torch's
        # OutOfMemoryError (a RuntimeError) is its message alone, without the type's name
        oom = self.oom(2048.0, None if self.failure == "graph_capture" else max(0.0, self.avail()))
        self.hit_exception(
            read_frames(GRAPH_OOM_FRAMES),
            f"Exception: Capture cuda graph failed: {oom.removeprefix('torch.OutOfMemoryError: ')}\n{sol}",
        )

    def capture(self, name: str, begin: str, mib: int, sleep: float, *, end: str = "",
                key: str = "", fail: bool = False) -> None:
        """One 0.5.14+ capture: its begin line, the time it takes, its memory, its end line; `key`
        names its entry in the engine's startup timings."""
        t0 = time.monotonic()
        log(f"Capture {name} CUDA graph begin. {begin}avail mem={gb(self.avail())} GB")
        self.phase_sleep(sleep)
        if fail:
            self.fail_capture()
        self.hold(self.used + mib)
        elapsed = time.monotonic() - t0
        if key:
            self.graph_s[key] = elapsed
        log(
            f"Capture {name} CUDA graph end. {end}elapsed={elapsed:.2f} s, "
            f"mem usage={gb(mib)} GB, avail mem={gb(self.avail())} GB."
        )

    def capture_prefill(self, graph_mib: int, per: float) -> None:
        """0.5.14+ captures the prefill graph before the decode one (cuda_graph_setup.py: "prefill
        before decode"; the H100's journals of 0.5.17)."""
        prefill = self.args.get("cuda_graph_backend_prefill")
        if self.args.get("disable_prefill_cuda_graph") or prefill == "disabled":  # either flag
            log(
                "Disable prefill CUDA graph because cuda_graph_config resolved "
                "prefill.backend='disabled' (e.g. via --cuda-graph-backend-prefill=disabled "
                "or auto-disable rules)."
            )
            return
        toks = prefill_graph_tokens(self.args)
        self.capture("target prefill", f"backend={prefill or 'breakable'}, num_tokens={toks}, ",
                     graph_mib // 4, per, key="prefill")

    def capture_decode(self, graph_mib: int, bs: list[int], per: float, fail: bool, spec: bool) -> None:
        a = self.args
        ntpr = (a.get("speculative_num_draft_tokens") or 4) if spec else 1
        listed = f"bs={bs}, "
        at_end = V >= DECODE_BS_AT_END
        self.capture(f"target {'verify' if spec else 'decode'}",
                     f"backend=full, {TOKENS_PER}={ntpr}, {'' if at_end else listed}",
                     graph_mib // 2, per, end=listed if at_end else "",
                     key="target_verify" if spec else "decode", fail=fail)

    def capture_draft(self, graph_mib: int, bs: list[int], per: float) -> None:
        a = self.args
        topk = a.get("speculative_eagle_topk") or 1
        self.capture("draft decode", f"backend=full, {TOKENS_PER}={topk}, bs={bs}, ", graph_mib // 8,
                     per, key="draft_decode")
        if self.rank == 0:
            draft = a.get("speculative_num_draft_tokens") or 4
            self.capture("draft extend", f"backend=full, {TOKENS_PER}={draft}, bs={bs}, ", 51, 0.0,
                         key="draft_extend")

    def capture_legacy(self, graph_mib: int, bs: list[int], per: float, fail: bool, spec: bool) -> None:
        """Before 0.5.14: the decode graph, the draft's, then the piecewise (prefill) graph."""
        a = self.args
        t0 = time.monotonic()
        log(
            f"Capture cuda graph begin. This can take up to several minutes. avail mem={gb(self.avail())} GB"
        )
        log(f"Capture cuda graph bs {bs}")
        self.phase_sleep(per)
        if fail:
            self.fail_capture()
        self.hold(self.used + graph_mib // 2)
        log(
            f"Capture cuda graph end. Time elapsed: {time.monotonic() - t0:.2f} s. "
            f"mem usage={gb(graph_mib / 2)} GB. avail mem={gb(self.avail())} GB."
        )
        if spec:
            t0 = time.monotonic()
            log(
                "Capture draft cuda graph begin. This can take up to several minutes. "
                f"avail mem={gb(self.avail())} GB"
            )
            self.phase_sleep(per)
            self.hold(self.used + graph_mib // 8)
            log(
                f"Capture draft cuda graph end. Time elapsed: {time.monotonic() - t0:.2f} s. "
                f"mem usage={gb(graph_mib / 8)} GB. avail mem={gb(self.avail())} GB."
            )
            t0 = time.monotonic()
            log(
                "Capture draft extend cuda graph begin. This can take up to several minutes. "
                f"avail mem={gb(self.avail())} GB"
            )
            log(
                f"Capture draft extend cuda graph end. Time elapsed: "
                f"{time.monotonic() - t0 + 0.05:.2f} s. mem usage=0.05 GB. "
                f"avail mem={gb(self.avail())} GB."
            )
        if a.get("disable_piecewise_cuda_graph"):
            log("Disable piecewise CUDA graph because --disable-piecewise-cuda-graph is set")
        else:
            t0 = time.monotonic()
            log(f"Capture piecewise CUDA graph begin. avail mem={gb(self.avail())} GB")
            maxtok = a.get("piecewise_cuda_graph_max_tokens") or 4096
            toks = [
                t for t in (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192) if t <= maxtok
            ]
            log(f"Capture cuda graph num tokens {toks}")
            self.phase_sleep(per)
            self.hold(self.used + graph_mib // 4)
            log(
                f"Capture piecewise CUDA graph end. Time elapsed: {time.monotonic() - t0:.2f} s. "
                f"mem usage={gb(graph_mib / 4)} GB. avail mem={gb(self.avail())} GB."
            )


def scheduler_main(rank: int, ctx: dict, ready_w: int, ctl_r: int) -> None:
    r = Rank(rank, ctx)
    try:
        r.run()
        r.initialized = True
        startup = {**r.timings, "cuda_graph": r.graph_s}
        os.write(
            ready_w,
            json.dumps({"rank": rank, "tokens": ctx.get("tokens", 0),
                        "max_running_requests": ctx.get("max_running_requests", 0), "startup": startup}).encode() + b"\n",
        )
        # wait for the server to be ready (or the parent to go away)
        data = os.read(ctl_r, 1)
        if not data and not ctx["settings"].get("orphan_children"):
            os._exit(0)
        if data and ctx["failure"] == "crash_after_ready" and rank == 0:
            time.sleep(float(ctx["settings"].get("crash_after_ready_s", 2.0)))
            r.hit_exception(
                [
                    (
                        f"{PKG}/sglang/srt/managers/scheduler.py",
                        1120,
                        "event_loop_overlap",
                        "batch_result = self.run_batch(batch)",
                    ),
                    (
                        f"{PKG}/sglang/srt/model_executor/model_runner.py",
                        2760,
                        "forward",
                        "output = self._forward_raw(",
                    ),
                ],
                "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel "
                "errors might be asynchronously reported at some other API call, so the "
                "stacktrace below might be incorrect.\nFor debugging consider passing "
                "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
                "assertions.\n",
            )
        while True:
            time.sleep(3600)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        os._exit(1)


# --------------------------------------------------------------------------- HTTP


class State:
    ready = False
    bound = False
    args: dict = {}
    changes: list = []
    launch_command = ""
    tokens_per_s = 200.0
    max_total_tokens = 0
    max_running_requests = 0  # rank 0's, as the scheduler resolved it
    started = time.time()
    ready_endpoint = V >= READY_ENDPOINT  # a build may still lack it (settings' ready_endpoint = false)
    shutting_down = False  # after the first SIGTERM (TokenizerManager.gracefully_exit)
    in_flight = 0  # generation requests being answered now (what /v1/loads and /get_load count)
    in_flight_lock = threading.Lock()


# Admin routes the simulation serves: @auth_level(AuthLevel.ADMIN_OPTIONAL) in http_server.py
# from 0.5.8 (before, every route took api_key alike). SGLang marks no route ADMIN_FORCE.
ADMIN_ROUTES = ("/flush_cache",)
FLUSHED = (b"Cache flushed.\nPlease check backend logs for more details. "
           b"(When there are running or waiting requests, the operation will not be performed.)\n")

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "then", "some", "more", "tokens", "flow", "out", "of", "this", "simulated", "model", "at", "a", "steady", "rate"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, fmt: str, *a: object) -> None:  # uvicorn-style access log instead
        pass

    def _access(self, status: int) -> None:
        path = self.path.split("?")[0]
        excl = State.args.get("uvicorn_access_log_exclude_prefixes") or []
        if any(path.startswith(p) for p in excl):
            return
        access(
            f"{self.client_address[0]}:{self.client_address[1]}",
            f"{self.command} {self.path} HTTP/1.1",
            status,
        )

    def _send(self, status: int, body: object = b"", ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        if ctype:  # Starlette's bare Response(status_code=...) sends no content-type
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._access(status)

    def _auth_ok(self, path: str) -> bool:
        key, admin = State.args.get("api_key"), State.args.get("admin_api_key")  # admin_api_key from 0.5.8
        exempt = ("/health", "/metrics") + (("/ready",) if State.ready_endpoint else ())
        if path.startswith(exempt) or self.command == "OPTIONS":
            return True
        header = self.headers.get("Authorization", "")
        if V < (0, 5, 8):  # add_api_key_middleware: api_key on every route, the exact header
            return not key or header == f"Bearer {key}"
        # utils/auth.py decide_request_auth: an ADMIN_OPTIONAL route takes admin_api_key when it is
        # set (api_key is then refused there), else api_key; every other route takes api_key only
        want = (admin or key) if path in ADMIN_ROUTES else key
        if not want:
            return True
        scheme, sep, token = header.partition(" ")  # any case of "bearer"
        return bool(sep) and scheme.lower() == "bearer" and hmac.compare_digest(token, want)

    def _body(self) -> dict:
        n = int(self.headers.get("content-length") or 0)
        if not n:
            return {}
        try:
            return json.loads(self.rfile.read(n))
        except ValueError:
            return {}

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if not self._auth_ok(path):
            return self._send(401, {"error": "Unauthorized"})
        if path == "/flush_cache":
            return self._send(200, FLUSHED, "text/plain")
        a = State.args
        if path in ("/health", "/health_generate"):
            if State.shutting_down:  # http_server.py's health_generate says so at every call
                log("Health check request received during shutdown. Returning 503.")
            return self._send(200 if State.ready else 503, b"", "text/plain")
        if path == "/ready" and State.ready_endpoint:  # TokenizerManager.is_ready: up, not paused or exiting
            return self._send(200 if State.ready and not State.shutting_down else 503, b"", "")
        if path == "/ping":  # SageMaker's health check
            return self._send(200, b"", "")
        if path in ("/model_info", "/get_model_info"):
            return self._send(
                200,
                {
                    "model_path": a["model_path"],
                    "tokenizer_path": a["tokenizer_path"],
                    "is_generation": True,
                    "preferred_sampling_params": None,
                    "weight_version": "default",
                    "has_image_understanding": is_multimodal(State.cfg),  # type: ignore[attr-defined]
                    "has_audio_understanding": False,
                    "model_type": State.cfg.get("model_type"),  # type: ignore[attr-defined]
                    "architectures": State.cfg.get("architectures"),  # type: ignore[attr-defined]
                },
            )
        if path == "/v1/models":
            return self._send(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": a["served_model_name"],
                            "object": "model",
                            "created": int(State.started),
                            "owned_by": "sglang",
                            "root": a["model_path"],
                            "parent": None,
                            "max_model_len": a["context_length"],
                        }
                    ],
                },
            )
        if path in ("/server_info", "/get_server_info"):
            info = dict(a)  # api_key included, as SGLang's /server_info has it
            info.update(
                {
                    "version": VERSION,
                    "launch_command": State.launch_command,
                    "auto_adjusted": State.changes,
                    "status": "ready" if State.ready else "starting",
                    "internal_states": [
                        {
                            "max_total_num_tokens": State.max_total_tokens,
                            "last_gen_throughput": 0.0,
                            "speculative_num_draft_tokens": a.get("speculative_num_draft_tokens"),
                        }
                    ],
                }
            )
            if V >= SERVER_INFO_FRONTEND:
                info["frontend"] = "python"
            return self._send(200, info)
        if path == "/v1/loads" and V >= (0, 5, 8):  # entrypoints/v1_loads.py
            return self._send(200, self._loads())
        if path == "/get_load" and V < (0, 5, 21):  # the deprecated shim, gone in 0.5.21
            row = self._load_row()
            return self._send(200, [{"dp_rank": 0, "num_reqs": row["num_running_reqs"], "num_waiting_reqs": 0,
                                     "num_tokens": row["num_used_tokens"], "num_pending_tokens": 0,
                                     "ts_tic": time.perf_counter()}])
        if path == "/metrics" and a.get("enable_metrics"):
            body = (
                f'sglang:num_running_reqs{{model_name="{a["served_model_name"]}"}} 0.0\n'
                f'sglang:max_total_num_tokens{{model_name="{a["served_model_name"]}"}} '
                f"{State.max_total_tokens}.0\n"
            ).encode()
            return self._send(200, body, "text/plain; version=0.0.4")
        return self._send(404, {"detail": "Not Found"})

    def _load_row(self) -> dict:
        running = State.in_flight
        capacity = State.max_total_tokens or 1
        used = min(capacity, running * 64)
        mrr = State.max_running_requests or State.args.get("max_running_requests") or 1
        return {"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": 0, "num_used_tokens": used,
                "num_total_tokens": used, "max_total_num_tokens": State.max_total_tokens,
                "token_usage": round(used / capacity, 4), "gen_throughput": running * State.tokens_per_s,
                "cache_hit_rate": 0.0, "utilization": round(running / mrr, 4), "max_running_requests": mrr}

    def _loads(self) -> dict:
        """GET /v1/loads as the host's SGLang answers it (the shape by release: LOADS_*)."""
        row = self._load_row()
        stamp = datetime.datetime.now(datetime.UTC).isoformat()
        if V < LOADS_SNAPSHOT:  # dataclasses.asdict(GetLoadsReqOutput), None and timestamp left out
            row["num_total_reqs"] = row["num_running_reqs"] + row["num_waiting_reqs"]
            aggregate = {"total_running_reqs": row["num_running_reqs"], "total_waiting_reqs": 0,
                         "total_reqs": row["num_total_reqs"], "total_used_tokens": row["num_used_tokens"],
                         "total_tokens": row["num_total_tokens"], "avg_token_usage": row["token_usage"],
                         "avg_throughput": row["gen_throughput"], "avg_utilization": row["utilization"]}
            return {"timestamp": stamp, "version": VERSION, "dp_rank_count": 1, "loads": [row],
                    "aggregate": aggregate}
        # LoadSnapshot.to_dict: its core keys in the struct's order (no memory section: the simulation
        # keeps no per-rank weight/KV/graph figures in the API process)
        snap = {"timestamp": time.time(), "num_waiting_uncached_tokens": 0,
                "num_active_tokens": row["num_total_tokens"], "num_prealloc_ready_tokens": 0,
                "total_prefill_uncached_tokens": 0, "total_prefill_busy_us": 0, "decode_moments": None, **row}
        keys = ["dp_rank", "num_running_reqs", "num_waiting_reqs", "num_waiting_uncached_tokens", "num_used_tokens",
                "num_total_tokens", "max_total_num_tokens", "max_running_requests", "token_usage", "gen_throughput",
                "cache_hit_rate", "utilization"]
        if V >= LOADS_ROW_TIMESTAMP:
            keys.insert(0, "timestamp")
        if V >= LOADS_ACCELERATOR:
            keys.insert(keys.index("num_total_tokens") + 1, "num_active_tokens")
            if V >= LOADS_PREALLOC_READY:
                keys.insert(keys.index("num_active_tokens") + 1, "num_prealloc_ready_tokens")
            keys += ["total_prefill_uncached_tokens", "total_prefill_busy_us", "decode_moments"]
        answer = {"timestamp": stamp, "version": VERSION}
        if V >= LOADS_ACCELERATOR:
            tp = int(State.args.get("tp_size") or 1) * int(State.args.get("pp_size") or 1)
            answer.update({"accelerator": sim_gpu.config().get("name"), "num_accelerators": tp})
        return {**answer, "loads": [{k: snap[k] for k in keys}]}

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        if not self._auth_ok(path):
            return self._send(401, {"error": "Unauthorized"})
        if path == "/flush_cache":
            return self._send(200, FLUSHED, "text/plain")
        body = self._body()
        if path == "/generate":
            sp = body.get("sampling_params") or {}
            n = int(sp.get("max_new_tokens") or 16)
            prompt = body.get("text") or body.get("input_ids") or ""
            ptoks = len(prompt) if isinstance(prompt, list) else max(1, len(str(prompt).split()))
            return self._generate(n, ptoks, bool(body.get("stream")), "native")
        if path in ("/v1/completions", "/v1/chat/completions"):
            n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            prompt = body.get("prompt") or json.dumps(body.get("messages") or "")
            ptoks = max(1, len(str(prompt).split()))
            kind = "chat" if path.endswith("chat/completions") else "completion"
            return self._generate(n, ptoks, bool(body.get("stream")), kind, body)
        return self._send(404, {"detail": "Not Found"})

    def _generate(
        self, n: int, ptoks: int, stream: bool, kind: str, body: dict | None = None
    ) -> None:
        if not State.bound:
            return self._send(503, {"error": "server starting"})
        with State.in_flight_lock:
            State.in_flight += 1
        try:
            self._answer(n, ptoks, stream, kind, body)
        finally:
            with State.in_flight_lock:
                State.in_flight -= 1

    def _answer(self, n: int, ptoks: int, stream: bool, kind: str, body: dict | None) -> None:
        delay = 1.0 / max(0.001, State.tokens_per_s)
        rid = f"{random.getrandbits(64):016x}"
        model = State.args.get("served_model_name")
        t0 = time.monotonic()
        toks = [" " + WORDS[i % len(WORDS)] for i in range(n)]

        def final_obj(text: str) -> dict:
            usage = {"prompt_tokens": ptoks, "completion_tokens": n, "total_tokens": ptoks + n}
            if kind == "native":
                return {
                    "text": text,
                    "output_ids": list(range(n)),
                    "meta_info": {
                        "id": rid,
                        "prompt_tokens": ptoks,
                        "completion_tokens": n,
                        "cached_tokens": 0,
                        "finish_reason": {"type": "length", "length": n},
                        "e2e_latency": time.monotonic() - t0,
                    },
                }
            if kind == "chat":
                return {
                    "id": rid,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "length",
                        }
                    ],
                    "usage": usage,
                }
            return {
                "id": rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
                ],
                "usage": usage,
            }

        if not stream:
            time.sleep(delay * n)
            return self._send(200, final_obj("".join(toks)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        text = ""
        try:
            for i, tok in enumerate(toks):
                time.sleep(delay)
                text += tok
                last = i == n - 1
                if kind == "native":
                    obj = {
                        "text": text,
                        "output_ids": list(range(i + 1)),
                        "meta_info": {
                            "id": rid,
                            "prompt_tokens": ptoks,
                            "completion_tokens": i + 1,
                            "finish_reason": {"type": "length", "length": n} if last else None,
                        },
                    }
                elif kind == "chat":
                    obj = {
                        "id": rid,
                        "object": "chat.completion.chunk",
                        "model": model,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"content": tok},
                                "finish_reason": "length" if last else None,
                            }
                        ],
                    }
                else:
                    obj = {
                        "id": rid,
                        "object": "text_completion",
                        "model": model,
                        "choices": [
                            {
                                "index": 0,
                                "text": tok,
                                "logprobs": None,
                                "finish_reason": "length" if last else None,
                            }
                        ],
                    }
                self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.flush()
            if (
                kind != "native"
                and body
                and (body.get("stream_options") or {}).get("include_usage")
            ):
                usage = {"prompt_tokens": ptoks, "completion_tokens": n, "total_tokens": ptoks + n}
                self.wfile.write(
                    f"data: {json.dumps({'id': rid, 'choices': [], 'usage': usage})}\n\n".encode()
                )
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self._access(200)


# --------------------------------------------------------------------------- main


CHILDREN: list[int] = []
SCHEDULERS: list[int] = []


class Dist:
    """Multi-node rendezvous at --dist-init-addr (a plain TCP handshake in place of
    torch.distributed's TCPStore).  Node 0 listens on the address's port and releases its
    ranks' "Init torch distributed" once every other node has connected; the other nodes
    connect (retrying while node 0 is not up yet).  A node whose peer goes away makes its
    schedulers fail like torch.distributed does (gloo: Connection closed by peer)."""

    def __init__(self, args: dict, nnodes: int, node_rank: int, tp_local: int) -> None:
        self.nnodes, self.node_rank, self.tp_local = nnodes, node_rank, tp_local
        addr = args.get("dist_init_addr")
        self.endpoint: tuple[str, int] | None = None
        if addr:
            host, _, port = str(addr).rpartition(":")
            self.endpoint = (host.strip("[]") or "127.0.0.1", int(port))
        self.dist_r, self.dist_w = os.pipe()
        self.peer = mmap.mmap(-1, 256)  # shared with the forked schedulers
        self.all_ready = threading.Event()
        self.sock: socket.socket | None = None

    def start(self) -> None:
        os.close(self.dist_r)
        if self.endpoint is None:
            return  # no --dist-init-addr: the nodes never find each other (SGLang hangs too)
        target = self._serve if self.node_rank == 0 else self._join
        threading.Thread(target=target, daemon=True).start()

    def _release(self) -> None:
        os.write(self.dist_w, b"x" * self.tp_local)

    def _lost(self, peer: str) -> None:
        self.peer[: len(peer) + 1] = peer.encode() + b"\0"
        for pid in SCHEDULERS:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR1)

    def _serve(self) -> None:
        assert self.endpoint is not None
        family = socket.AF_INET6 if ":" in self.endpoint[0] else socket.AF_INET
        srv = socket.create_server(("", self.endpoint[1]), family=family, backlog=64)
        peers: dict[int, tuple[socket.socket, str]] = {}
        while len(peers) < self.nnodes - 1:
            conn, addr = srv.accept()
            try:
                conn.settimeout(10)
                rank = int(conn.recv(64).split(b"\n")[0])
                conn.settimeout(None)
            except (OSError, ValueError):
                conn.close()
                continue
            if rank in peers:
                peers[rank][0].close()
            peers[rank] = (conn, f"[{addr[0]}]:{addr[1]}")
            for r, (c, _) in list(peers.items()):  # forget nodes that left meanwhile
                rl, _, _ = select.select([c], [], [], 0)
                if rl and not c.recv(64, socket.MSG_PEEK):
                    c.close()
                    del peers[r]
        srv.close()
        for c, _ in peers.values():
            c.sendall(b"go\n")
        self._release()
        ready: set[int] = set()
        by_sock = {c: (r, name) for r, (c, name) in peers.items()}
        while True:
            rl, _, _ = select.select(list(by_sock), [], [])
            for c in rl:
                r, name = by_sock[c]
                try:
                    data = c.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self._lost(name)
                    return
                if b"ready" in data:
                    ready.add(r)
                    if len(ready) == self.nnodes - 1:
                        self.all_ready.set()

    def _join(self) -> None:
        assert self.endpoint is not None
        while True:
            try:
                s = socket.create_connection(self.endpoint, timeout=2)
            except OSError:
                time.sleep(0.2)
                continue
            try:
                s.sendall(f"{self.node_rank}\n".encode())
                s.settimeout(None)
                if s.recv(16).startswith(b"go"):
                    break
            except OSError:
                pass
            s.close()
            time.sleep(0.2)
        self.sock = s
        self._release()
        while True:
            try:
                if not s.recv(4096):
                    break
            except OSError:
                break
        host, port = self.endpoint
        self._lost(f"[{host}]:{port}")

    def node_ready(self) -> None:
        """Node >= 1: all local ranks are ready (node 0 serves once every node is)."""
        with contextlib.suppress(OSError):
            if self.sock is not None:
                self.sock.sendall(b"ready\n")


class DummyHealthHandler(BaseHTTPRequestHandler):
    """Nodes with node_rank >= 1: SGLang's launch_dummy_health_check_server (no tokenizer,
    no API; uvicorn at log level warning, so no access log)."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, fmt: str, *a: object) -> None:
        pass

    PATHS = ("/health", "/health_generate", "/ping")  # each an @app.get route (utils/common.py)

    def _json(self, status: int, body: bytes, *headers: tuple[str, str]) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.split("?")[0] in self.PATHS:
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        self._json(404, b'{"detail":"Not Found"}')

    def do_other(self) -> None:
        """Any other method: Starlette answers a known path with 405 and its `allow` header
        (FastAPI's HTTPException handler: {"detail":"Method Not Allowed"}; a GET route takes no
        HEAD), an unknown one with 404."""
        with contextlib.suppress(ValueError, OSError):
            self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.split("?")[0] in self.PATHS:
            self._json(405, b'{"detail":"Method Not Allowed"}', ("allow", "GET"))
        else:
            self._json(404, b'{"detail":"Not Found"}')

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_other


def kill_children() -> None:
    for pid in CHILDREN:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def kill_process_tree() -> None:
    """SGLang's kill_process_tree(os.getpid()): the children, then the process itself (SIGKILL)."""
    if V >= KILL_TREE_LINE:
        log(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}")
    kill_children()
    os.kill(os.getpid(), signal.SIGKILL)


def on_sigquit(signum: int, frame: object) -> None:
    log("Received sigquit from a child process. It usually means the child failed.")
    kill_process_tree()


def log_startup_timings(ranks: dict[int, dict], began: float) -> None:
    """Engine._set_startup_time: each figure is the slowest rank's (observability/startup_time.py)."""
    steps = {"load_weight": 0.0, "kv_cache_allocation": 0.0, "scheduler_e2e": 0.0}
    graphs = dict.fromkeys(GRAPH_PHASES, 0.0)
    for msg in ranks.values():
        startup = msg.get("startup") or {}
        for key in steps:
            steps[key] = max(steps[key], float(startup.get(key, 0.0)))
        for key in graphs:
            graphs[key] = max(graphs[key], float(startup.get("cuda_graph", {}).get(key, 0.0)))
    log("Engine startup timings (s): " + ", ".join(f"{k}={v:.2f}" for k, v in steps.items())
        + ", cuda_graph={" + ", ".join(f"{k}={v:.2f}" for k, v in graphs.items())
        + f"}}, tokenizer_e2e={time.monotonic() - began:.2f}")


def bind_http(host: str, port: int, handler: type) -> ThreadingHTTPServer:
    """The HTTP server bound like uvicorn binds (SO_REUSEADDR); raises OSError when it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Server(ThreadingHTTPServer):
        address_family = family
        allow_reuse_address = True
        daemon_threads = True

    return Server((host, port), handler)


def serve_dummy_health(args: dict, dist: Dist) -> None:
    """What a node with node_rank >= 1 does once its schedulers are ready."""
    dist.node_ready()
    host, port = args.get("host") or "127.0.0.1", int(args.get("port") or 30000)
    log(f"Starting dummy health check server at {host}:{port}")
    try:
        httpd = bind_http(host, port, DummyHealthHandler)
    except OSError as e:
        uv(
            f"[Errno {e.errno}] error while attempting to bind on address ('{host}', {port}): "
            f"{(e.strerror or '').lower()}",
            "ERROR",
            stamped=False,
        )
        kill_children()
        sys.exit(1)

    def on_term(signum: int, frame: object) -> None:
        kill_children()
        for pid in SCHEDULERS:  # SGLang joins its schedulers once uvicorn has stopped
            log(f"Scheduler or DataParallelController {pid} terminated with -15")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    httpd.serve_forever()
    os._exit(0)


def main(argv: list[str], entry: str) -> None:
    began = time.monotonic()
    if entry == "launch_server" and V >= (0, 5, 11):  # seen on 0.5.11 (the H200) and 0.5.17 (the H100)
        import warnings

        warnings.warn_explicit(
            "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
            "recommended entrypoint.\n  Example: sglang serve --model-path <model> [options]",
            UserWarning,
            f"{PKG}/sglang/launch_server.py",
            next(line for since, line in LAUNCH_WARNING_LINES if since <= V),
        )
    settings = load_settings()
    global _WRAPPER
    _WRAPPER = str(settings.get("log_wrapper") or "")
    failure = active_failure(settings, argv)
    catalog = load_catalog()
    parser = build_parser(catalog)
    if failure == "bad_argument":
        bad = settings["fail_when_arg"] or ["--simulated-bad-argument"]
        parser.print_usage(sys.stderr)
        emit_raw(f"sglang serve: error: unrecognized arguments: {' '.join(bad)}\n")
        sys.exit(2)
    try:
        argv = merge_config(argv, parser)
    except ValueError as exc:
        _traceback_exit(_entry_frames(entry) + [_prepare_frame(), _CONFIG_FRAME], f"ValueError: {exc}")
    ns = parser.parse_args(argv)
    args = vars(ns)
    if not args.get("model_path"):
        parser.error("the following arguments are required: --model-path/--model")
    gpu = sim_gpu.config()
    early: list[str] = []
    try:
        cfg = model_config(args["model_path"], entry)
        changes = resolve(args, cfg, gpu, entry, early)
    except Refusal as refusal:
        _traceback_exit(refusal.frames, refusal.final)
    for line in early:
        log(line)
    engine_logger(args).info(args_repr(args))

    startup_s = float(settings["startup_s"])
    if failure == "slow":
        startup_s = float(settings["slow_start_s"])
    tp = int(args.get("tp_size") or 1)
    nnodes = int(args.get("nnodes") or 1)
    node_rank = int(args.get("node_rank") or 0)
    if tp % nnodes:
        _traceback_exit(
            _entry_frames(entry)
            + [
                _prepare_frame(),
                (f"{PKG}/sglang/srt/server_args.py", 4110, "check_server_args", "assert ("),
            ],
            "AssertionError: tp_size must be divisible by number of nodes",
        )
    tp_local = tp // nnodes
    first_rank = node_rank * tp_local
    dist = Dist(args, nnodes, node_rank, tp_local)
    arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
    ctx = {
        "args": args,
        "settings": settings,
        "failure": failure,
        "gpu": gpu,
        "startup_s": startup_s,
        "arch": arch,
        "parent": os.getpid(),
        "weights_mib": int(cfg.get("sim_weights_mib", 0))
        or int(
            (settings.get("mem_mib") or args["mem_fraction_static"] * int(gpu["memory_mib"])) * 0.45
        ),
        "kv_bytes_per_token": int(cfg.get("sim_kv_bytes_per_token", 65536)),
        "nnodes": nnodes,
        "first_rank": first_rank,
        "dist_r": dist.dist_r,
        "peer": dist.peer,
    }
    signal.signal(signal.SIGQUIT, on_sigquit)
    ready_r, ready_w = os.pipe()
    ctl = []
    for rank in range(first_rank, first_rank + tp_local):
        cr, cw = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.close(cw)
            for _, w in ctl:
                os.close(w)
            os.close(dist.dist_w)
            signal.signal(signal.SIGQUIT, signal.SIG_DFL)
            scheduler_main(rank, ctx, ready_w, cr)
            os._exit(0)
        os.close(cr)
        ctl.append((pid, cw))
        CHILDREN.append(pid)
        SCHEDULERS.append(pid)
    if node_rank == 0:  # nodes with node_rank >= 1 run no tokenizer or detokenizer
        pid = os.fork()
        if pid == 0:  # detokenizer
            set_proc_name("sglang::detokenizer")
            if not settings.get("orphan_children"):
                set_pdeathsig()
            while True:
                time.sleep(3600)
        CHILDREN.append(pid)
    os.close(ready_w)
    if nnodes > 1:
        dist.start()

    # wait for every rank
    buf = b""
    ready_ranks: dict[int, dict] = {}
    while len(ready_ranks) < tp_local:
        try:
            rl, _, _ = select.select([ready_r], [], [], 0.5)
        except InterruptedError:
            continue
        if rl:
            data = os.read(ready_r, 4096)
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                ready_ranks[msg["rank"]] = msg
        for rank, (cpid, _) in enumerate(ctl, start=first_rank):
            with contextlib.suppress(ChildProcessError):
                wpid, status = os.waitpid(cpid, os.WNOHANG)
                if wpid and rank not in ready_ranks:
                    code = (
                        -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                    )
                    kill_children()
                    _traceback_exit(
                        _entry_frames(entry)
                        + [
                            (
                                f"{PKG}/sglang/srt/entrypoints/engine.py",
                                2008,
                                "_launch_subprocesses",
                                "raise RuntimeError(",
                            )
                        ],
                        f"RuntimeError: Rank {rank} scheduler died during initialization (exit "
                        f"code: {code}). If exit code is -9 (SIGKILL), a common cause is the OS "
                        "OOM killer. Run `dmesg -T | grep -i oom` to check.",
                    )
    State.args = args
    State.cfg = cfg  # type: ignore[attr-defined]
    State.changes = changes
    State.launch_command = shlex.join(sys.orig_argv)
    State.tokens_per_s = float(settings["tokens_per_s"])
    State.ready_endpoint = V >= READY_ENDPOINT and bool(settings["ready_endpoint"])
    State.max_total_tokens = ready_ranks.get(0, {}).get("tokens", 0)
    State.max_running_requests = ready_ranks.get(0, {}).get("max_running_requests", 0)
    if node_rank == 0 and V >= STARTUP_TIMINGS:
        log_startup_timings(ready_ranks, began)
    if node_rank >= 1:
        serve_dummy_health(args, dist)
    if nnodes > 1:
        # the ranks of every node take part in the memory and graph steps
        while not dist.all_ready.wait(0.5):
            pass

    # uvicorn
    host, port = args.get("host") or "127.0.0.1", int(args.get("port") or 30000)
    uv(f"Started server process [{os.getpid()}]")
    uv("Waiting for application startup.")
    uv("Application startup complete.")
    try:
        if failure == "port_in_use":
            raise OSError(98, "address already in use")
        httpd = bind_http(host, port, Handler)
    except OSError as e:
        uv(
            f"[Errno {e.errno}] error while attempting to bind on address ('{host}', {port}): "
            f"{(e.strerror or '').lower()}",
            "ERROR",
        )
        uv("Waiting for application shutdown.")
        uv("Application shutdown complete.")
        sys.exit(1)
    State.bound = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if args.get("ssl_certfile") else "http"
    uv(f"Uvicorn running on {scheme}://{shown}:{port} (Press CTRL+C to quit)")

    def exit_now() -> None:
        uv("Shutting down")
        uv("Waiting for application shutdown.")
        uv("Application shutdown complete.")
        uv(f"Finished server process [{os.getpid()}]")
        kill_children()
        os._exit(0)

    def remaining_line(remaining: int) -> str:
        return (f"Gracefully exiting... Remaining number of requests {remaining}. "
                f"Remaining requests remaining_rids={[f'{random.getrandbits(64):016x}' for _ in range(remaining)]}.")

    def kill_own_tree() -> None:
        # SGLang ends every stop with kill_process_tree(include_parent=True): the main process dies
        # by SIGKILL, and systemd records "code=killed, status=9/KILL", "Failed with result 'signal'"
        # (0.5.11 on an H200: tests/fixtures/h200-real/restart.journal)
        kill_process_tree()

    def drain_then_exit() -> None:
        # TokenizerManager.sigterm_watchdog: it looks every 5 s, and exits once no request remains
        time.sleep(random.uniform(0.0, 5.0))
        while True:
            remaining = State.in_flight
            log(remaining_line(remaining))
            if not remaining:
                break
            time.sleep(5.0)
        kill_own_tree()

    def stop_at_once() -> None:
        """SIGTERM to the whole control group at once (systemd's KillMode=control-group), as the real
        0.5.11 showed it: with no request running the watchdog's first look ends it; with one, a
        scheduler's own SIGTERM is seen first and SIGQUIT ends it, cutting the request. 0.5.17 (on an
        H100, tests/fixtures/h200-real/weight-cache) took the scheduler's death for a crash at every
        stop, and its crash diagnostics (0.5.13+) slept 5 s unless both were turned off."""
        if State.in_flight or V >= CRASH_DIAGNOSTICS:
            log(f"Subprocess scheduler_0 (pid={SCHEDULERS[0] if SCHEDULERS else os.getpid() + 1}) crashed with "
                "exit code -15. Triggering SIGQUIT for cleanup...")
            log("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
            if V >= CRASH_DIAGNOSTICS and crash_diagnostics_on():
                log("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
                time.sleep(5.0)
                log("No live scheduler processes found; skipping py-spy and CUDA coredump.")
        else:
            log(remaining_line(0))
        kill_own_tree()

    def on_term(signum: int, frame: object) -> None:
        if signum != signal.SIGTERM or not (State.ready or draining):
            exit_now()
        if not draining:  # the first SIGTERM: /health answers 503 from now on, requests still run
            draining.append(True)
            State.ready, State.shutting_down = False, True
            log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
            if settings.get("sigterm_drain"):
                threading.Thread(target=drain_then_exit, daemon=True).start()
            else:
                stop_at_once()  # does not return

    draining: list[bool] = []

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    if failure == "hang" and settings.get("hang_at") == "warmup":
        while True:
            time.sleep(3600)
    # warmup, like SGLang: poll /model_info, then one short generation
    time.sleep(startup_s * 0.1)
    client = "127.0.0.1" if httpd.address_family == socket.AF_INET else "::1"
    if not args.get("skip_server_warmup"):
        base = f"http://{client if host in ('0.0.0.0', '::') else shown}:{port}"
        headers = {"Authorization": f"Bearer {args['api_key']}"} if args.get("api_key") else {}
        with contextlib.suppress(Exception):
            urllib.request.urlopen(
                urllib.request.Request(base + "/model_info", headers=headers), timeout=10
            ).read()
        # the scheduler's line for the warm-up's prefill (0.5.11 and 0.5.17 on a GPU alike)
        graphs = not (args.get("disable_cuda_graph") or args.get("disable_prefill_cuda_graph"))
        os.write(
            2,
            f"[{_now()}{' TP0' if tp > 1 else ''}] Prefill batch, #new-seq: 1, #new-token: 6, "
            "#cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, "
            f"cuda graph: {graphs}, input throughput (token/s): 0.00\n".encode(),
        )
        with contextlib.suppress(Exception):
            req = urllib.request.Request(
                base + "/generate",
                method="POST",
                data=json.dumps(
                    {
                        "text": "The capital city of France is",
                        "sampling_params": {"temperature": 0, "max_new_tokens": 8},
                    }
                ).encode(),
                headers={"content-type": "application/json", **headers},
            )
            saved = State.tokens_per_s
            urllib.request.urlopen(req, timeout=30).read()
            State.tokens_per_s = saved
        time.sleep(startup_s * 0.05)
    State.ready = True
    log("The server is fired up and ready to roll!")
    for _, w in ctl:
        with contextlib.suppress(OSError):
            os.write(w, b"R")
    while True:
        time.sleep(3600)
