//! The archive's schema as migrations.

/// Schema migrations, in order; each runs in one transaction and bumps `meta.schema_version`.
/// Written in the SQL both databases accept.
pub const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        test TEXT NOT NULL,
        kind TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        cycle BIGINT NOT NULL,
        planned_start BIGINT NOT NULL,
        planned_end BIGINT NOT NULL,
        exclusive INTEGER NOT NULL,
        status TEXT NOT NULL,
        rank INTEGER NOT NULL,
        reason TEXT,
        detail TEXT,
        started_at BIGINT,
        ended_at BIGINT,
        throughput_mbps DOUBLE PRECISION,
        loss_percent DOUBLE PRECISION,
        rtt_ms DOUBLE PRECISION,
        capacity_mbps DOUBLE PRECISION,
        result TEXT,
        reported_by TEXT,
        updated_at BIGINT NOT NULL
    );
    CREATE INDEX runs_pair_time ON runs (src, dst, planned_start);
    CREATE INDEX runs_time ON runs (planned_start);
    CREATE INDEX runs_status ON runs (status, planned_end);
    CREATE TABLE run_resources (
        run_id TEXT NOT NULL,
        resource TEXT NOT NULL,
        PRIMARY KEY (run_id, resource)
    );
    CREATE INDEX run_resources_resource ON run_resources (resource, run_id);
    CREATE TABLE points (
        run_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        t BIGINT NOT NULL,
        size INTEGER NOT NULL,
        wait_us DOUBLE PRECISION,
        offered_mbps DOUBLE PRECISION,
        recv_mbps DOUBLE PRECISION,
        loss_percent DOUBLE PRECISION,
        jitter_us DOUBLE PRECISION,
        PRIMARY KEY (run_id, idx)
    );
    CREATE INDEX points_pair_time ON points (src, dst, t);
    CREATE TABLE counters (
        host TEXT NOT NULL,
        iface TEXT NOT NULL,
        t BIGINT NOT NULL,
        span_ms BIGINT NOT NULL,
        rx_bytes BIGINT NOT NULL,
        tx_bytes BIGINT NOT NULL,
        rx_packets BIGINT NOT NULL,
        tx_packets BIGINT NOT NULL,
        rx_errors BIGINT NOT NULL,
        tx_errors BIGINT NOT NULL,
        rx_drops BIGINT NOT NULL,
        tx_drops BIGINT NOT NULL,
        PRIMARY KEY (host, iface, t)
    );
    CREATE INDEX counters_time ON counters (t);
    CREATE TABLE alert_events (
        id TEXT PRIMARY KEY,
        t BIGINT NOT NULL,
        rule TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        metric TEXT NOT NULL,
        state TEXT NOT NULL,
        value DOUBLE PRECISION,
        threshold DOUBLE PRECISION,
        message TEXT NOT NULL,
        delivered INTEGER NOT NULL
    );
    CREATE INDEX alert_events_time ON alert_events (t);
    CREATE INDEX alert_events_pair ON alert_events (rule, src, dst, t);
    CREATE TABLE agents (
        name TEXT PRIMARY KEY,
        last_seen BIGINT NOT NULL,
        software TEXT,
        config_hash TEXT
    );",
];
