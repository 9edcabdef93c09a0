-- bench/generate.sql — loaded by bench/stack.sh into every bench database:
-- posts, targets and comments written straight in SQL, shared by
-- bench/run-inbox, bench/run-feed and bench/run-comments-scale so that the
-- data sets they measure are made the same way.

-- Which comments each company gets: comments numbered first .. first+count-1
-- of one sequence over all companies, so a bench can generate any slice of
-- it (a batch) with bench_comments. posts: posts per account, used when
-- bench_posts is not told.
CREATE TABLE bench_plan (
  company_id  text PRIMARY KEY REFERENCES companies (id),
  first       bigint NOT NULL,
  count       bigint NOT NULL,
  posts       integer NOT NULL
);
CREATE INDEX bench_plan_first ON bench_plan (first);

-- bench_posts(companies, n): n published posts on each account of each
-- company (n NULL: the company's bench_plan.posts), with their targets (ids
-- pt_bench_<account>_<n>), made by the company's first test client.
CREATE FUNCTION bench_posts(companies text[], n integer DEFAULT NULL) RETURNS void LANGUAGE sql AS $$
WITH x AS MATERIALIZED (
  SELECT a.id AS account, a.platform, a.platform_account_id, a.company_id,
         (SELECT min(k.id) FROM api_clients k WHERE k.company_id = a.company_id AND k.environment = 'test') AS client_id, p
    FROM social_accounts a LEFT JOIN bench_plan b USING (company_id),
         generate_series(1, coalesce(n, b.posts)) p
   WHERE a.company_id = ANY (companies) AND a.environment = 'test'),
made AS (
  INSERT INTO posts (id, company_id, environment, client_id, status, content, publishing, operation_id, created_at)
  SELECT 'post_bench_' || account || '_' || p, company_id, 'test', client_id, 'published',
         '{"type":"text","message":"Bench post"}', '{"mode":"immediate"}', 'op_bench', now() - interval '400 days'
    FROM x)
-- One statement: the targets' foreign key is checked at its end, when the posts are there.
INSERT INTO post_targets (id, post_id, company_id, environment, social_account_id, platform, position, status,
                          platform_post_id, published_at)
  SELECT 'pt_bench_' || account || '_' || p, 'post_bench_' || account || '_' || p, company_id, 'test', account,
         platform, 0, 'published', platform_account_id || '_' || (900000 + p), now() - interval '400 days'
    FROM x;
$$;

-- bench_comments(lo, hi): the comments numbered lo .. hi of bench_plan's
-- sequence, on the posts of bench_posts. Per company: accounts of unequal
-- size (40, 20, 15, 10, 10 and 5 % with six accounts; with fewer, the
-- shares of the missing ones fold onto the first), posts picked evenly, a
-- year of creation times; 5 % written by the account, 2 % hidden, 1 %
-- deleted; texts of four words from a vocabulary of 24, "Love this! " in
-- front of 40 % of them and the rare word "chargeback" in about 1 in 2,000.
-- A comment's id and platform id depend on its company and its number only.
-- setseed() in the session first makes the data set repeatable.
CREATE FUNCTION bench_comments(lo bigint, hi bigint) RETURNS void LANGUAGE sql AS $$
WITH b AS MATERIALIZED (
  SELECT company_id, first, count, posts FROM bench_plan WHERE first <= hi AND first + count > lo),
acc AS MATERIALIZED (
  SELECT a.company_id, row_number() OVER (PARTITION BY a.company_id ORDER BY a.connected_at, a.id) - 1 AS n,
         count(*) OVER (PARTITION BY a.company_id) AS accounts, a.id, a.platform, a.platform_account_id
    FROM social_accounts a JOIN b USING (company_id) WHERE a.environment = 'test'),
g AS MATERIALIZED (
  SELECT b.company_id, s - b.first + 1 AS g,
         (ARRAY[0,0,0,0,0,0,0,0,1,1,1,1,2,2,2,3,3,4,4,5])[1 + floor(random() * 20)::int] AS k,
         1 + floor(random() * b.posts)::int AS p, now() - random() * interval '365 days' AS at,
         random() AS r_from, random() AS r_hidden, random() AS r_deleted, random() AS r_love, random() AS r_rare,
         ARRAY[floor(random() * 24)::int, floor(random() * 24)::int, floor(random() * 24)::int,
               floor(random() * 24)::int] AS w
    FROM b, generate_series(greatest(lo, b.first), least(hi, b.first + b.count - 1)) s),
words AS (SELECT ARRAY['great','price','when','available','thanks','nice','photo','shipping','size','color',
                       'store','open','today','delivery','order','beautiful','awesome','question','please',
                       'help','want','buy','cool','again'] AS v)
INSERT INTO comments (id, company_id, environment, post_target_id, post_id, social_account_id, platform,
                      platform_comment_id, platform_post_id, parent_platform_comment_id, text, author_platform_id,
                      author_name, is_from_account, is_hidden, is_deleted, created_at, created_at_known, version)
SELECT 'cmt_' || md5(g.company_id || g.g), g.company_id, 'test', 'pt_bench_' || acc.id || '_' || g.p,
       'post_bench_' || acc.id || '_' || g.p, acc.id, acc.platform, 'b' || g.g,
       acc.platform_account_id || '_' || (900000 + g.p), NULL,
       CASE WHEN g.r_love < 0.4 then 'Love this! ' ELSE '' END
         || initcap(words.v[1 + g.w[1]]) || ' ' || words.v[1 + g.w[2]] || ' ' || words.v[1 + g.w[3]] || ' '
         || words.v[1 + g.w[4]] || CASE WHEN g.r_rare < 0.0005 THEN ' chargeback?' ELSE '.' END,
       CASE WHEN g.r_from < 0.05 THEN acc.platform_account_id ELSE (100000000000000 + g.g)::text END,
       CASE WHEN g.r_from < 0.05 THEN 'The account' ELSE 'Commenter ' || g.g END,
       g.r_from < 0.05, g.r_hidden < 0.02, g.r_deleted < 0.01, g.at, true, extract(epoch FROM g.at)
  FROM g JOIN acc ON acc.company_id = g.company_id AND acc.n = g.k % acc.accounts, words;
$$;
