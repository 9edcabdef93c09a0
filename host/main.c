/*
 * main.c — the sgw command: serve, migrate, reload, check, and the operator
 * commands written in Lua (handlers/cli/<command>.lua).
 *
 * Configuration is read once here, before any thread starts, which is what
 * lets the rest of the host read it without locks.
 */
#include "sgw.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>


static char root[PATH_MAX];
/* Set when the root is an installed tree (<prefix>/share/sgw beside
 * <prefix>/bin/sgw): its configuration file is then read too. */
static char installed_prefix[PATH_MAX];

typedef struct cli_args {
    const char *command;
    const char *args[64];
    int         nargs;
    int         help;      /* sgw --help, sgw help */
    int         version;   /* sgw --version */
} cli_args;

typedef struct command {
    const char *name;
    const char *summary;
    /* Usage and what it does, for `sgw <name> --help`; NULL for the operator
     * commands in Lua, which print their own from the table that parses
     * their flags (lib/cli.lua). */
    const char *help;
    int (*run)(const cli_args *);
} command;

static const char global_options[] =
    "options every command takes:\n"
    "  --config FILE         read FILE over the defaults (key = value lines; a file holding secrets must be mode 0600)\n"
    "  --set key=value       set one key over every file (repeatable; shows in the process list: no secrets)\n"
    "  --help, -h            print this help\n";

/* The project root holds config/, handlers/, lib/ and migrations/: SGW_ROOT
 * when set; else the working directory when it has them; else, walking up
 * from the binary, a directory that has them (build/sgw in a checkout) or an
 * installed tree, <prefix>/share/sgw for <prefix>/bin/sgw. */
static int find_root(void) {
    const char *env = getenv("SGW_ROOT");
    char cand[PATH_MAX + 32];
    if (env && *env) {
        snprintf(root, sizeof root, "%s", env);
        return 0;
    }
    if (access("config/sgw.conf", R_OK) == 0) {
        if (!getcwd(root, sizeof root)) return -1;
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) break;
        *slash = 0;
        snprintf(cand, sizeof cand, "%s/config/sgw.conf", exe);
        if (access(cand, R_OK) == 0) {
            snprintf(root, sizeof root, "%s", exe);
            return 0;
        }
        snprintf(cand, sizeof cand, "%s/share/sgw/config/sgw.conf", exe);
        if (up > 0 && access(cand, R_OK) == 0) {
            if (snprintf(root, sizeof root, "%s/share/sgw", exe) >= (int)sizeof root) return -1;
            snprintf(installed_prefix, sizeof installed_prefix, "%s", exe[0] ? exe : "/");
            return 0;
        }
    }
    return -1;
}

/* An installed tree's own configuration file: <sysconfdir>/sgw/sgw.conf, where
 * a relative sysconfdir is under the prefix, except that a /usr install reads
 * /etc (the GNU convention, as GNUInstallDirs installs it). */
static void installed_config_path(char *buf, size_t n) {
    const char *etc = SGW_INSTALL_SYSCONFDIR;
    if (etc[0] == '/') snprintf(buf, n, "%s/sgw/sgw.conf", etc);
    else if (strcmp(installed_prefix, "/usr") == 0) snprintf(buf, n, "/%s/sgw/sgw.conf", etc);
    else snprintf(buf, n, "%s/%s/sgw/sgw.conf", strcmp(installed_prefix, "/") ? installed_prefix : "", etc);
}

/* Sorts the words of the command line: the command, its arguments, and the
 * global flags (--config and --set are read later, once the defaults are). */
static int parse_args(int argc, char **argv, cli_args *out) {
    memset(out, 0, sizeof *out);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0 || strcmp(a, "--set") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sgw: %s needs a value; see sgw --help\n", a);
                return -1;
            }
            i++;
        } else if (!out->command && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            out->help = 1;
        } else if (!out->command && strcmp(a, "--version") == 0) {
            out->version = 1;
        } else if (!out->command && a[0] == '-') {
            fprintf(stderr, "sgw: unknown option %s; see sgw --help\n", a);
            return -1;
        } else if (!out->command) {
            out->command = a;
        } else if (out->nargs < (int)(sizeof out->args / sizeof out->args[0])) {
            out->args[out->nargs++] = a;
        } else {
            fprintf(stderr, "sgw: too many arguments\n");
            return -1;
        }
    }
    /* `sgw help serve` is `sgw serve --help`. */
    if (out->command && strcmp(out->command, "help") == 0) {
        if (out->nargs == 0) {
            out->command = NULL;
            out->help = 1;
        } else {
            out->command = out->args[0];
            out->args[0] = "--help";
            out->nargs = 1;
        }
    }
    return 0;
}

/* Defaults (config/sgw.conf under the root), then an installed tree's own
 * file, then each --config file in order, then every --set, whatever their
 * order on the command line. */
static int load_config(int argc, char **argv) {
    char err[1024], path[PATH_MAX + 32];
    if (find_root()) {
        fprintf(stderr, "sgw: cannot find config/sgw.conf (run from the project directory, install sgw, or set SGW_ROOT)\n");
        return -1;
    }
    snprintf(path, sizeof path, "%s/config/sgw.conf", root);
    if (config_load_file(path, 1, err, sizeof err)) {
        fprintf(stderr, "sgw: %s\n", err);
        return -1;
    }
    if (installed_prefix[0]) {
        installed_config_path(path, sizeof path);
        if (access(path, F_OK) == 0 && config_load_file(path, 0, err, sizeof err)) {
            fprintf(stderr, "sgw: %s\n", err);
            return -1;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i + 1 < argc; i++) {
            if (strcmp(argv[i], "--config") == 0) {
                if (pass == 0 && config_load_file(argv[i + 1], 0, err, sizeof err)) {
                    fprintf(stderr, "sgw: %s\n", err);
                    return -1;
                }
                i++;
            } else if (strcmp(argv[i], "--set") == 0) {
                const char *kv = argv[++i];
                const char *eq = strchr(kv, '=');
                if (!eq) {
                    fprintf(stderr, "sgw: --set expects key=value, got '%s'\n", kv);
                    return -1;
                }
                char key[256];
                snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
                if (pass == 1 && config_set(key, eq + 1, err, sizeof err)) {
                    fprintf(stderr, "sgw: %s\n", err);
                    return -1;
                }
            }
        }
    }
    const char *lvl = config_str("log.level");
    log_set_level(!strcmp(lvl, "debug") ? LOG_DEBUG : !strcmp(lvl, "warn") ? LOG_WARN
                  : !strcmp(lvl, "error") ? LOG_ERROR : LOG_INFO);
    return 0;
}

static const char *lua_root(char *buf, size_t n) {
    const char *r = config_str("lua.root");
    if (r[0] == '/') snprintf(buf, n, "%s", r);
    else snprintf(buf, n, "%s/%s", root, r);
    return buf;
}

static int require_database(void) {
    if (!*config_str("database.url")) {
        fprintf(stderr, "sgw: database.url is empty: set it in a config file or with --set database.url=postgresql://...\n");
        return -1;
    }
    return 0;
}

static int cmd_migrate(const cli_args *a) {
    (void)a;
    if (require_database()) return 2;
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/migrations", root);
    /* Directly: its advisory lock spans transactions, which a pooler in
     * transaction mode would not keep on one server connection. */
    return pg_migrate(pg_direct_url(), dir) == 0 ? 0 : 1;
}

static int init_runtime(void) {
    char err[4096], lr[PATH_MAX * 2];
    if (luart_init(lua_root(lr, sizeof lr), err, sizeof err)) {
        fprintf(stderr, "sgw: handlers do not load: %s\n", err);
        return -1;
    }
    return 0;
}

static int cmd_check(const cli_args *a) {
    (void)a;
    if (init_runtime()) return 1;
    printf("{\"status\":\"ok\",\"generation\":%llu}\n", (unsigned long long)luart_generation_id());
    luart_shutdown();
    return 0;
}

static size_t collect_body(char *ptr, size_t size, size_t nmemb, void *ud) {
    fwrite(ptr, size, nmemb, (FILE *)ud);
    return size * nmemb;
}

static int cmd_reload(const cli_args *a) {
    (void)a;
    char url[512];
    snprintf(url, sizeof url, "http://%s/reload", config_str("admin.listen"));
    CURL *c = curl_easy_init();
    if (!c) return 1;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, stdout);
    /* The same configuration names the admin listener's token, if any. */
    struct curl_slist *headers = NULL;
    char auth[600];
    if (*config_str("admin.token")) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", config_str("admin.token"));
        if (!(headers = curl_slist_append(NULL, auth))) {
            curl_easy_cleanup(c);
            return 1;
        }
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    }
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(headers);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    printf("\n");
    if (rc != CURLE_OK) {
        fprintf(stderr, "sgw: cannot reach the admin listener at %s (%s): is sgw serving with this admin.listen?\n",
                config_str("admin.listen"), curl_easy_strerror(rc));
        return 1;
    }
    return status == 200 ? 0 : 1;
}

/* read_secret(prompt): one line from stdin, for passwords. On a terminal the
 * prompt goes to stderr and typing is not echoed; otherwise the first line of
 * the piped input is taken. The trailing newline is dropped. */
static int l_read_secret(lua_State *L) {
    const char *prompt = luaL_optstring(L, 1, "Password: ");
    int tty = isatty(STDIN_FILENO);
    struct termios old, quiet;
    if (tty) {
        fputs(prompt, stderr);
        fflush(stderr);
        if (tcgetattr(STDIN_FILENO, &old) == 0) {
            quiet = old;
            quiet.c_lflag &= (tcflag_t)~ECHO;
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
        } else {
            tty = 0;
        }
    }
    char line[1024];
    char *got = fgets(line, sizeof line, stdin);
    if (tty) {
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
        fputs("\n", stderr);
    }
    if (!got) return 0;
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    lua_pushlstring(L, line, n);
    explicit_bzero(line, sizeof line);
    return 1;
}

/* console.migrations: the migration files the root ships (NNNN_name.sql),
 * for `sgw doctor` to compare with what the database has applied. */
static void push_migrations(lua_State *L) {
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/migrations", root);
    lua_newtable(L);
    DIR *d = opendir(dir);
    if (!d) return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name), digits = strspn(e->d_name, "0123456789");
        if (digits && e->d_name[digits] == '_' && len > 4 && strcmp(e->d_name + len - 4, ".sql") == 0) {
            lua_pushstring(L, e->d_name);
            lua_rawseti(L, -2, ++n);
        }
    }
    closedir(d);
}

/* Operator commands live in Lua (handlers/cli/<command>.lua): they get the
 * arguments and a table of console functions and facts ({read_secret,
 * migrations}), and return exit_code, stdout_text, stderr_text. */
static int cmd_lua(const cli_args *a) {
    if (init_runtime()) return 1;
    sgw_worker w;
    char err[4096], mod[300];
    int code = 1;
    if (worker_init(&w, 0, "cli", err, sizeof err)) {
        fprintf(stderr, "sgw: %s\n", err);
        luart_shutdown();
        return 1;
    }
    snprintf(mod, sizeof mod, "handlers.cli.%s", a->command);
    for (char *p = mod; *p; p++)
        if (*p == '-') *p = '_';
    lua_State *L = w.L;
    if (luart_require(L, mod, err, sizeof err)) {
        fprintf(stderr, "sgw: %s does not load: %s\n", a->command, err);
    } else {
        lua_newtable(L);
        for (int i = 0; i < a->nargs; i++) {
            lua_pushstring(L, a->args[i]);
            lua_rawseti(L, -2, i + 1);
        }
        lua_newtable(L);
        lua_pushcfunction(L, l_read_secret);
        lua_setfield(L, -2, "read_secret");
        push_migrations(L);
        lua_setfield(L, -2, "migrations");
        if (luart_call(L, 2, 3, 0) != LUA_OK) {
            fprintf(stderr, "sgw: %s failed: %s\n", a->command, lua_tostring(L, -1));
        } else {
            code = (int)luaL_optinteger(L, -3, 0);
            if (lua_type(L, -2) == LUA_TSTRING) printf("%s\n", lua_tostring(L, -2));
            if (lua_type(L, -1) == LUA_TSTRING) fprintf(stderr, "sgw: %s\n", lua_tostring(L, -1));
        }
    }
    worker_destroy(&w);
    luart_shutdown();
    return code;
}

/* Whether the database has every migration in dir; sets sgw_schema_current
 * when it has. Says once (log, systemd STATUS) what it waits for. */
static int check_schema(const char *dir, int *reported) {
    char first[256];
    int pending = pg_pending_migrations(pg_direct_url(), dir, first, sizeof first);
    if (pending == 0) {
        atomic_store(&sgw_schema_current, 1);
        if (*reported) log_msg(LOG_INFO, "migrations", "the database is migrated; ready");
        return 1;
    }
    if (*reported) return 0;
    *reported = 1;
    if (pending > 0) {
        log_msg(LOG_WARN, "migrations", "the database lacks %d migration(s) this sgw ships, from %s: "
                "run sgw migrate; not ready until then", pending, first);
        notify_send("STATUS=waiting for migrations (%d missing, from %s): run sgw migrate", pending, first);
    } else {
        log_msg(LOG_WARN, "migrations", "cannot tell whether the database is migrated (no connection?); "
                "not ready until it can");
        notify_send("STATUS=waiting for the database to tell its migrations");
    }
    return 0;
}

static void notify_ready(void) {
    notify_send("READY=1\nSTATUS=serving on %s, handlers generation %llu", config_str("http.listen"),
                (unsigned long long)luart_generation_id());
}

static int cmd_serve(const cli_args *a) {
    (void)a;
    if (require_database()) return 2;
    if (init_runtime()) return 1;
    if (httpc_global_init()) {
        fprintf(stderr, "sgw: cannot initialise libcurl\n");
        return 1;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    /* Every thread inherits this mask; only the main thread takes signals. */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Before any thread: the notification socket is set up once. */
    notify_init();
    /* Without the writer, request lines are written one by one. */
    if (log_start_writer()) log_msg(LOG_WARN, "log", "cannot start the log writer; request lines are written one by one");

    int n = (int)config_int("http.workers");
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = (int)(cores > 0 ? cores * 2 : 4);
    }
    int rc = 1;
    long hashers = config_int("crypto.hash_threads");
    if (hashers <= 0) hashers = sysconf(_SC_NPROCESSORS_ONLN);
    /* Without it, password hashes run on the loops themselves. */
    if (offload_start((int)hashers)) log_msg(LOG_WARN, "offload", "cannot start the hashing threads; hashes block their loop");
    if (workers_start(n, http_complete)) goto out_workers;
    if (invalidations_start()) log_msg(LOG_WARN, "invalidations", "cannot start the subscriber; every request asks Redis");
    if (replica_start()) log_msg(LOG_WARN, "replica", "cannot start the read replica's check; reads go to the primary");
    if (jobs_start((int)config_int("jobs.workers"))) goto out_jobs;
    /* Told before the listeners start, so a migrated database is ready at once. */
    char migrations_dir[PATH_MAX + 16];
    snprintf(migrations_dir, sizeof migrations_dir, "%s/migrations", root);
    int schema_reported = 0;
    check_schema(migrations_dir, &schema_reported);
    /* The public listener first: once /healthz answers, requests are taken. */
    if (http_start()) goto out_http;
    if (admin_start()) goto out_admin;
    log_msg(LOG_INFO, "serving", "public %s, admin %s, %d workers, generation %llu", config_str("http.listen"),
            config_str("admin.listen"), n, (unsigned long long)luart_generation_id());

    /* The main thread waits for signals and, between them, pings the
     * watchdog: a main loop that hangs stops the pings. Until the database
     * has every migration this sgw ships, it looks again each tick and holds
     * READY=1 back (/readyz says so too), so a deploy whose migrate has not
     * run is never taken for a healthy one. */
    uint64_t tick_ms = notify_watchdog_ms() && notify_watchdog_ms() < 1000 ? notify_watchdog_ms() : 1000;
    if (atomic_load(&sgw_schema_current)) notify_ready();
    for (;;) {
        if (!atomic_load(&sgw_schema_current) && check_schema(migrations_dir, &schema_reported))
            notify_ready();
        notify_watchdog_tick();
        struct timespec ts = { (time_t)(tick_ms / 1000), (long)(tick_ms % 1000) * 1000000L };
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGHUP) {
            char err[4096];
            luart_reload(err, sizeof err);
        } else if (sig == SIGTERM || sig == SIGINT) {
            break;
        }
    }
    log_msg(LOG_INFO, "draining", "stopped accepting; waiting for in-flight requests and jobs");
    notify_send("STOPPING=1\nSTATUS=draining in-flight requests and jobs");
    atomic_store(&sgw_shutting_down, 1);
    http_quiesce();
    /* One drain window for requests and jobs together. */
    uint64_t deadline = clock_mono_ms() + (uint64_t)(config_num("http.drain_seconds") * 1000.0);
    jobs_request_stop(deadline);
    while ((http_inflight() > 0 || workers_queue_depth() > 0) && clock_mono_ms() < deadline) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        notify_watchdog_tick();
    }
    rc = 0;
    admin_stop();
    /* Whatever is still suspended is resumed before the listener stops (MHD
     * aborts otherwise): the workers finish what they hold and queue, and
     * answer 503 to anything later. */
    workers_stop();
out_admin:
    http_stop();
out_http:
    jobs_stop();
out_jobs:
    replica_stop();
    invalidations_stop();
    workers_stop();
out_workers:
    offload_stop();
    httpc_global_cleanup();
    luart_shutdown();
    notify_close();
    if (rc == 0) log_msg(LOG_INFO, "stopped", "clean shutdown");
    else fprintf(stderr, "sgw: could not start; see the log lines above for what to fix\n");
    log_stop_writer();
    return rc;
}

static const command commands[] = {
    { "serve", "run the gateway (public API, admin listener, job workers)",
      "usage: sgw serve [options]\n"
      "\n"
      "Runs the gateway: the public API on http.listen, the admin listener (/healthz, /readyz,\n"
      "/metrics, POST /reload) on admin.listen, and the job workers. Needs database.url and a\n"
      "migrated database (sgw migrate). SIGHUP reloads handlers/ and lib/; SIGTERM or SIGINT\n"
      "stops taking requests and waits up to http.drain_seconds for what is in flight.\n"
      "Under systemd (NOTIFY_SOCKET) it says READY=1 once listening, RELOADING=1/READY=1 around\n"
      "a reload, STOPPING=1 when draining, and pings the watchdog when WatchdogSec= is set.\n",
      cmd_serve },
    { "migrate", "apply migrations/ to database.url (safe to run concurrently)",
      "usage: sgw migrate [options]\n"
      "\n"
      "Applies the migrations/NNNN_*.sql files not yet in the database's schema_migrations, in\n"
      "order, each in its own transaction. Concurrent runs wait for each other (an advisory\n"
      "lock), so every instance may run it before it starts. Exit 0 when the schema is current.\n",
      cmd_migrate },
    { "reload", "ask the running instance at admin.listen to reload handlers/ and lib/",
      "usage: sgw reload [options]\n"
      "\n"
      "POSTs /reload to the instance listening on admin.listen (with admin.token when set), which\n"
      "loads handlers/ and lib/ again and keeps the previous ones when they do not load. Prints\n"
      "the instance's answer; exit 0 when it reloaded, 1 otherwise. The same as SIGHUP.\n",
      cmd_reload },
    { "check", "load handlers/ and lib/ and report whether they load",
      "usage: sgw check [options]\n"
      "\n"
      "Loads handlers/ and lib/ as serve would, without the database, and prints\n"
      "{\"status\":\"ok\",\"generation\":N}; exit 1 with the error when they do not load.\n",
      cmd_check },
    { "version", "print the version as JSON ({\"version\":\"...\"}; sgw --version: a plain line)",
      "usage: sgw version [options]\n"
      "       sgw --version\n"
      "\n"
      "Prints {\"version\":\"X.Y.Z\"}; sgw --version prints \"sgw X.Y.Z\" and needs no configuration.\n",
      NULL },
    { "doctor", "check a configuration before a deploy, one line per check", NULL, cmd_lua },
    { "company", "create companies (tenants)", NULL, cmd_lua },
    { "client", "create, rotate, revoke API clients and set their webhook", NULL, cmd_lua },
    { "account", "connect a Facebook Page or Instagram account with a token", NULL, cmd_lua },
    { "user", "create workspace users", NULL, cmd_lua },
    { "meta", "subscribe the Meta app to its webhooks", NULL, cmd_lua },
    { "sandbox", "add sandbox test pages", NULL, cmd_lua },
    { "jobs", "list dead jobs and run them again", NULL, cmd_lua },
};

static const command *find_command(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void usage(FILE *out) {
    fprintf(out, "usage: sgw <command> [options] [arguments]\n"
                 "       sgw --version\n"
                 "       sgw <command> --help\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n%s\n"
                 "Settings: config/sgw.conf holds every key with its default (an installed sgw reads\n"
                 "<prefix>/share/sgw/config/sgw.conf, then /etc/sgw/sgw.conf or <prefix>/etc/sgw/sgw.conf);\n"
                 "--config files override them, --set overrides both.\n", global_options);
}

/* The host's own commands take no arguments but --help. */
static int host_command_args(const command *c, const cli_args *a) {
    for (int i = 0; i < a->nargs; i++) {
        if (strcmp(a->args[i], "--help") == 0 || strcmp(a->args[i], "-h") == 0) {
            printf("%s\n%s", c->help, global_options);
            return 0;
        }
    }
    if (a->nargs) {
        fprintf(stderr, "sgw: %s: unexpected %s '%s'; see sgw %s --help\n", c->name,
                a->args[0][0] == '-' ? "option" : "argument", a->args[0], c->name);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv) {
    cli_args a;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (parse_args(argc, argv, &a)) return 2;
    if (a.version) {
        printf("sgw %s\n", SGW_VERSION);
        return 0;
    }
    if (!a.command) {
        usage(stdout);
        return 0;
    }
    const command *c = find_command(a.command);
    if (!c) {
        fprintf(stderr, "sgw: unknown command '%s'; see sgw --help\n", a.command);
        return 2;
    }
    if (c->help) {
        int early = host_command_args(c, &a);
        if (early >= 0) return early;
    }
    if (!c->run) {   /* version */
        printf("{\"version\":\"%s\"}\n", SGW_VERSION);
        return 0;
    }
    /* A configuration that does not load is what doctor is asked about. */
    if (load_config(argc, argv)) return strcmp(c->name, "doctor") == 0 ? 1 : 2;
    /* Before any Lua state: every state of the process shares it. */
    char err[512];
    if (shared_start(err, sizeof err)) {
        fprintf(stderr, "sgw: %s\n", err);
        config_free();
        return 2;
    }
    int rc = c->run(&a);
    shared_stop();
    config_free();
    return rc;
}
