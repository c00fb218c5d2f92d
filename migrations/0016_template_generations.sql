-- Generation numbers never repeat for a repository (#16, attack [1/7]): a generation's names
-- come from its number (`Names::template`), and `previewd destroy-template` or the idle drop
-- forget every row, while the database may still be on the server (a drop that never ran):
-- a number used again named a sealed database, which the new build's create Job leaves as it
-- is, and the build could never finish. The highest generation the repository ever started,
-- kept with its record, which outlives its generations.
ALTER TABLE template_repos ADD COLUMN last_generation INTEGER NOT NULL DEFAULT 0;
-- From what is recorded: the generations, and the ones previews were cloned from (a
-- preview keeps its number after the generation's row went).
UPDATE template_repos SET last_generation = max(
    coalesce((SELECT max(generation) FROM templates WHERE templates.repo = template_repos.repo), 0),
    coalesce((SELECT max(template_generation) FROM previews WHERE previews.repo = template_repos.repo), 0));
