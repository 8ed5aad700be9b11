-- lib/constants.lua: the facts shared with Python, generated from contextstore/core/layout.py
-- by lua_constants(): do not edit (tests/test_lua_files.py says how to write it again).
-- needs: (nothing)
local RANK = {system_prompt = 0, instruction = 1, retrieved_document = 2, working_memory = 3, tool_result = 4, user_message = 5, assistant_message = 6, code = 2, file = 2, text = 2, error = 4, repl_history = 4, custom = 99, other = 99}
local STRATEGIES = {remove_oldest = true, remove_low_priority = true, summarize = true, selective = true, clear_tool_results = true}
local SERVER_SIDE = {remove_oldest = true, remove_low_priority = true, clear_tool_results = true}
local F = {MAX_TOKENS = 'max_tokens', MAX_ITEMS = 'max_items', ITEM_LIMIT = 'item_limit', THRESHOLD = 'threshold', STRATEGY = 'strategy', TTL = 'ttl', TOKENS = 'tokens', ITEMS = 'items', SEQ = 'seq', COMPACTIONS = 'compactions', FREED = 'freed', CREATED_MS = 'created_ms', CREATED_US = 'created_us', ITEMS_OF = 'items:', TOKENS_OF = 'tokens:', KEEP_RECENT = 'keep_recent', CLEAR_AT_LEAST = 'clear_at_least', CLEAR_EXCLUDE = 'clear_exclude', WARN_PERCENT = 'warn_percent', EVENTS_MAXLEN = 'events_maxlen', WARNED = 'warned', ARCHIVE_TTL = 'archive_ttl', TARGET = 'target', SUMMARIES = 'summaries', EPOCH = 'epoch', REMOVED_BY_CALLER = 'removed_by_caller', PARENT = 'parent', FORK_POINT = 'fork_point', FORKS = 'forks', USED_INPUT = 'used_input', USED_OUTPUT = 'used_output', USED_CACHE_READ = 'used_cache_read', USED_CACHE_WRITE = 'used_cache_write', USAGE_RECORDS = 'usage_records', CALIBRATION = 'calibration', RATIOS = 'ratios', MESSAGE_GROUPS = 'message_groups'}
local VERSION_FIELDS = {'created_us', 'seq', 'removed_by_caller'}
local MAX_PRIORITY, MAX_TOKENS, MAX_TTL_SECONDS, MAX_ITEM_LIMIT = 100, 1000000000000, 1000000000, 200000
local RANK_WEIGHT, PRIORITY_WEIGHT, MAX_SEQ = 10000000000000, 10000000000, 9999999999
local SIZED = {user_message = 10000000000, assistant_message = 10000000000}
local STREAM_MAXLEN, MAX_EVENTS = 10000, 10000000
local REQUEST_LOG_MAX, REQUEST_LOG_TTL_MS, RECORD_FORMAT = 2000, 900000, 4
local STAGE_TTL_MS = 600000
local N_CONFIG = 13
local CONFIG_FIELDS = {'max_tokens', 'max_items', 'item_limit', 'threshold', 'strategy', 'ttl', 'keep_recent', 'clear_at_least', 'clear_exclude', 'warn_percent', 'events_maxlen', 'archive_ttl', 'target'}
local CONFIG_TEXT = {strategy = true, clear_exclude = true}
local CONFIG_FLOAT = {threshold = true, warn_percent = true, target = true}
local CONFIG_DEFAULTS = {keep_recent = '0', clear_at_least = '0', clear_exclude = '', warn_percent = '75.0', events_maxlen = '10000', archive_ttl = '86400', target = '0.0'}
local ARCHIVE_INDEX = '~expires'
local CLEARED = {placeholder = '[tool result cleared to save context]', key = 'context_cleared'}
local STORED_HEAD, MAX_TIME_US = '{"added_at_us":', 253402300799999999
local ITEM_ARGS = 9
local USAGE = {calibration_min = 0.5, calibration_max = 4.0, samples = 8, lookback = 256, message_overhead = 4, reply_priming = 3}
local PENDING = {max_inputs = 256, max_bytes = 8388608}
