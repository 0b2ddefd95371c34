-- The tool catalog of the seat's current tenure, written by the host at
-- attach (fenced by epoch), read by model rounds that run on any node.
ALTER TABLE seats ADD COLUMN tools jsonb;

-- One row per turn, keyed on its work: a later run of the same work (after a
-- host loss) reopens this row rather than adding one.
CREATE TABLE turns (
    seat        text NOT NULL,
    work_key    text NOT NULL,
    turn_id     text NOT NULL,
    -- the tenure that last opened the turn; an older one cannot reopen it
    epoch       bigint NOT NULL,
    -- every crewlet.Message trigger of the batch
    mail        jsonb NOT NULL DEFAULT '[]',
    -- indexes into mail of the triggers that need an answer, one thread each
    threads     jsonb NOT NULL DEFAULT '[]',
    -- the catalog snapshot the turn offers the model
    tools       jsonb,
    max_rounds  integer NOT NULL DEFAULT 0,
    -- running, then done, stopped or failed (crewlet.TurnStatus)
    status      text NOT NULL DEFAULT 'running',
    note        text NOT NULL DEFAULT '',
    stopped_by  text NOT NULL DEFAULT '',
    rounds      integer NOT NULL DEFAULT 0,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (seat, work_key)
);
CREATE INDEX turns_turn_id ON turns (turn_id);
CREATE INDEX turns_seat_started ON turns (seat, started_at DESC);

-- A turn's model conversations, one per trigger that needs an answer. work_key
-- here (and in turn_rounds and tool_calls) is the thread's: the work key of
-- its one trigger (crewlet.ThreadKey), so a trigger that comes back in another
-- batch resumes its conversation. key is deterministic ("user", "r3", "r3c1",
-- "note"), so a step run again appends nothing; seq keeps the order.
CREATE TABLE turn_messages (
    seat       text NOT NULL,
    work_key   text NOT NULL,
    thread     integer NOT NULL,
    key        text NOT NULL,
    seq        bigserial NOT NULL,
    -- a crewlet.ChatMessage
    message    jsonb NOT NULL,
    round      integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seat, work_key, thread, key)
);

-- One row per model call: its charge (tokens, counted once into
-- usage_counters when the row is first written) and its charter receipt (the
-- sha-256 and size of the exact system prompt, never the prose).
CREATE TABLE turn_rounds (
    seat          text NOT NULL,
    work_key      text NOT NULL,
    round         integer NOT NULL,
    profile       text NOT NULL DEFAULT '',
    system_sha256 text NOT NULL DEFAULT '',
    system_bytes  integer NOT NULL DEFAULT 0,
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seat, work_key, round)
);

-- The intent row of a tool call, written before the call: a second attempt
-- finds it and knows an earlier one may have reached outside.
CREATE TABLE tool_calls (
    seat        text NOT NULL,
    work_key    text NOT NULL,
    round       integer NOT NULL,
    call        integer NOT NULL,
    name        text NOT NULL,
    read_only   boolean NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (seat, work_key, round, call)
);

-- Tokens per budget window. scope is 'seat:{handle}' or 'company';
-- window_name is day, week or month ("window" is reserved in SQL);
-- window_start is the window's start on the company's clock.
CREATE TABLE usage_counters (
    scope        text NOT NULL,
    window_name  text NOT NULL,
    window_start timestamptz NOT NULL,
    tokens       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, window_name, window_start)
);

-- Nothing trims these tables yet: turns and their messages, rounds and tool
-- calls grow with every turn, usage_counters by six rows per seat per day at
-- most. A maintenance pass may delete finished turns (and their rows, by
-- (seat, work_key)) and counters of windows long past.
