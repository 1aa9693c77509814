"""Reading SGLang server logs: startup phases, readiness, failures, settings SGLang changed.

Shared by ``sgdeploy logcheck`` (a whole file) and ``apply`` (live journal lines). A pipeline,
one module per stage, each pure (no printing, no I/O):

    normalise   raw line -> ParsedLine (journal/ANSI/SGLang/uvicorn prefixes off)
    incidents   tracebacks and cause lines -> incidents, their kind and root line
    phases      startup phases, their figures, the phases a launch must produce
    settings    settings SGLang changed (its own lines and the server_args dump)
    report      LogEvent, Phase, Failure, Adjustment, LogReport (SPEC section 4's JSON)
    reader      LogReader: feeds every line through the stages; read_log for a whole file

    LogReader.feed(line)       incremental: returns the LogEvents that line caused
    LogReader.finish()         marks the end of input (a log without ready or error is `incomplete`)
    LogReader.report()         LogReport at any time; LogReport.as_json() is SPEC section 4's shape
    read_log(lines, ...)       feed + finish + report in one call
    expected_phases(server, v) the readiness phases a launch must produce

docs/logcheck.md says how to add a pattern.
"""

from sgdeploy.logs.incidents import FAILURE_KINDS, FAILURE_RULES
from sgdeploy.logs.normalise import ParsedLine, strip_line
from sgdeploy.logs.phases import PHASE_RULES, PHASES, decode_graph_disabled, expected_phases
from sgdeploy.logs.reader import LogReader, read_log
from sgdeploy.logs.report import Adjustment, Failure, LogEvent, LogReport, Phase
from sgdeploy.logs.settings import (
    ADJUST_RULES,
    BEHAVIOUR_FIELDS,
    parse_server_args,
    settings_changed,
)

__all__ = [
    "ADJUST_RULES",
    "BEHAVIOUR_FIELDS",
    "FAILURE_KINDS",
    "FAILURE_RULES",
    "PHASES",
    "PHASE_RULES",
    "Adjustment",
    "Failure",
    "LogEvent",
    "LogReader",
    "LogReport",
    "ParsedLine",
    "Phase",
    "decode_graph_disabled",
    "expected_phases",
    "parse_server_args",
    "read_log",
    "settings_changed",
    "strip_line",
]
