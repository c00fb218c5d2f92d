-- The example set's table. In a real set the app's migrations own the schema; a seed set
-- only adds rows.
CREATE TABLE IF NOT EXISTS example_users (
    id    integer PRIMARY KEY,
    email text    NOT NULL UNIQUE,
    name  text    NOT NULL
);
