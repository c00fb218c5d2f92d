-- Upserts, so that a reseed restores these rows without duplicating them.
INSERT INTO example_users (id, email, name) VALUES
    (1, 'ada@example.com', 'Ada Lovelace'),
    (2, 'grace@example.com', 'Grace Hopper'),
    (3, 'edsger@example.com', 'Edsger Dijkstra')
ON CONFLICT (id) DO UPDATE SET email = excluded.email, name = excluded.name;
