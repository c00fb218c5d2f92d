-- Template databases (#16): each repository with `database_template = true` keeps one
-- template database, in generations, each built by a helper Application of its own;
-- previews' databases are cloned from the newest ready generation.

CREATE TABLE templates (
    id           INTEGER PRIMARY KEY,
    repo         TEXT    NOT NULL,                    -- owner/name, lower-case
    generation   INTEGER NOT NULL CHECK (generation > 0),
    base_sha     TEXT    NOT NULL,                    -- the default branch's head it was built from
    cluster      TEXT    NOT NULL,
    names        TEXT    NOT NULL,                    -- recorded names (JSON): never recomputed
    -- building: applied, Argo CD building it; ready: sealed, previews clone it; failed: its
    -- build failed (previews keep the last ready one, or seed); retiring: being deleted
    state        TEXT    NOT NULL CHECK (state IN ('building', 'ready', 'failed', 'retiring')),
    message      TEXT,
    applied_hash TEXT,
    created_at   INTEGER NOT NULL,
    ready_at     INTEGER,
    updated_at   INTEGER NOT NULL,
    UNIQUE (repo, generation)
);

-- What a generation's helper Application provisions, as the previews' ledger: deleted
-- with the generation's row.
CREATE TABLE template_ledger (
    id          INTEGER PRIMARY KEY,
    template_id INTEGER NOT NULL REFERENCES templates (id) ON DELETE CASCADE,
    kind        TEXT    NOT NULL,
    namespace   TEXT,
    name        TEXT    NOT NULL,
    state       TEXT    NOT NULL,                     -- applied, confirmed, deleting
    created_at  INTEGER NOT NULL,
    UNIQUE (template_id, kind, namespace, name)
);

-- Sealed values only, as sealed_secrets: plaintext never reaches this table.
CREATE TABLE template_secrets (
    id               INTEGER PRIMARY KEY,
    template_id      INTEGER NOT NULL REFERENCES templates (id) ON DELETE CASCADE,
    namespace        TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    scope            TEXT    NOT NULL CHECK (scope IN ('strict', 'namespace-wide', 'cluster-wide')),
    cert_fingerprint TEXT    NOT NULL,
    encrypted_data   TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    UNIQUE (template_id, namespace, name)
);

-- Per repository: what the next generation is built from and whether one is wanted.
CREATE TABLE template_repos (
    repo          TEXT    PRIMARY KEY,
    base_sha      TEXT    NOT NULL,                   -- the newest default-branch head seen
    -- when it was pushed (a push's repository.pushed_at; 0 for a PR's base): a push is
    -- taken only if newer, so a late delivery never moves the template back
    base_at       INTEGER NOT NULL DEFAULT 0,
    -- 0: nothing asked; 1: a push moved the base (at most every template_refresh);
    -- 2: a writer's /preview refresh-template (at once)
    refresh       INTEGER NOT NULL DEFAULT 0 CHECK (refresh IN (0, 1, 2)),
    refresh_by    TEXT,                               -- who asked, for the history
    -- set by `previewd destroy-template`, template_idle, or the repository leaving [[repos]]
    destroy       TEXT,
    last_used_at  INTEGER NOT NULL,                   -- a preview was cloned or lived
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;

-- The generation a preview's database was cloned from (NULL: seeded), decided at the
-- seed generation `template_seed` (a reseed bumps seed_generation: decided anew), and
-- whether that clone was seen done (the helper Application ready at that seed generation).
ALTER TABLE previews ADD COLUMN template_generation INTEGER;
ALTER TABLE previews ADD COLUMN template_seed INTEGER;
ALTER TABLE previews ADD COLUMN template_confirmed INTEGER;
-- Previews from before: seeded, and decided so.
UPDATE previews SET template_seed = seed_generation;
