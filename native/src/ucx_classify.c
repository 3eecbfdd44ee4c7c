/* ucx_classify.c: the classification of the transport view's counts by
 * UCX's protocol selection tables (tinyprof_ucx_classify, tinyprof_ucx_rows).
 * Part of libtinyprof_mpi: included by tinyprof_ucx.c, whose endpoint texts
 * it reads; not compiled on its own. */

/* ----------------------------------------------------- classification */

/* Which protocol and transport UCX selects for an operation: the row of the
 * endpoint's table for the operation and variant whose size range holds the
 * operation's size. The one implementation: tinyprof's Python package and
 * C++ header read the rows classified (tinyprof_ucx_rows). The tables are
 * read as UCX 1.20 prints them: `| <context> | <title> |` starts a table (a
 * title printed again goes on with it), `| <low>..<high> | <protocol> |
 * <transport> |` is a row (sizes with binary units K M G T, or `inf`; a
 * protocol's "(?) " mark dropped), a row with no sizes adds a lane to the
 * row before it; any other line is skipped, and so is a row whose sizes do
 * not read (as Python's int() would read them). */

/* Operation names, in TP_UCP_* order, then "ucp<N>". */
static const char *const g_ucp_names[16] = {
    "tag_send", "tag_send_sync", "tag_recv", "tag_msg_recv", "am_send", "am_recv_data", "put", "get",
    "ucp8",     "ucp9",          "ucp10",    "ucp11",        "ucp12",   "ucp13",        "ucp14", "ucp15"};

/* Titles of the tables operations are selected by, up to the variant
 * (src/ucp/proto/proto.c); NULL for receives, whose sender selects. */
static const char *const g_titles[8] = {
    "tagged message by ucp_tag_send*", "synchronous tagged message by ucp_tag_send_sync*", NULL, NULL,
    "active message by ucp_am_send*",  NULL, "remote memory write by ucp_put*", "remote memory read by ucp_get*"};

/* A size bound, wide enough to hold any printed size without losing its
 * order against an int64_t size: larger ones saturate at TP_HUGE. */
__extension__ typedef __int128 tp_bound;
#define TP_HUGE ((tp_bound)1 << 80)
#define TP_INF ((tp_bound)1 << 126)

typedef struct {
    tp_bound low, high;
    char *protocol, *transport;
    int64_t at;                 /* tinyprof_ucx_rows: offset of protocol, transport in its strings; -1 */
} tp_range;

typedef struct {
    char *title;
    tp_range *rows;
    size_t n, cap;
} tp_ptable;

typedef struct {
    tp_ptable *v;
    size_t n, cap;
} tp_ptables;

static void tp_ptables_free(tp_ptables *t) {
    for (size_t i = 0; i < t->n; i++) {
        for (size_t k = 0; k < t->v[i].n; k++) {
            free(t->v[i].rows[k].protocol);
            free(t->v[i].rows[k].transport);
        }
        free(t->v[i].rows);
        free(t->v[i].title);
    }
    free(t->v);
    free(t);
}

/* White space and line breaks as Python's str.strip() and splitlines() see ASCII. */
static int tp_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }
static int tp_newline(char c) { return c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e); }
static int tp_digit(char c) { return c >= '0' && c <= '9'; }

/* [a, b) without surrounding white space, NUL-terminated in place. */
static char *tp_strip(char *a, char *b) {
    while (a < b && tp_space(*a)) a++;
    while (b > a && tp_space(b[-1])) b--;
    *b = 0;
    return a;
}

/* A size as UCX prints it, `93`, `256K`, `inf`, into *out: 1, or 0 if not one. */
static int tp_size(const char *text, tp_bound *out) {
    static const char units[] = "KMGT";
    size_t n = strlen(text), i = 0;
    if (strcmp(text, "inf") == 0) {
        *out = TP_INF;
        return 1;
    }
    const char *unit = n ? strchr(units, text[n - 1]) : NULL;
    if (unit) n--;
    while (i < n && tp_space(text[i])) i++;
    while (n > i && tp_space(text[n - 1])) n--;
    int negative = i < n && text[i] == '-';
    if (i < n && (text[i] == '-' || text[i] == '+')) i++;
    if (i == n || !tp_digit(text[i])) return 0;
    tp_bound v = 0;
    for (; i < n; i++) {
        if (text[i] == '_' && i + 1 < n && tp_digit(text[i + 1])) continue;    /* 1_000 */
        if (!tp_digit(text[i])) return 0;
        v = v * 10 + (text[i] - '0');
        if (v > TP_HUGE) v = TP_HUGE;
    }
    v *= (tp_bound)1 << (unit ? 10 * (unit - units + 1) : 0);
    *out = negative ? -v : v;
    return 1;
}

static tp_ptable *tp_table_named(tp_ptables *t, const char *title) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].title, title) == 0) return &t->v[i];
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        tp_ptable *v = realloc(t->v, cap * sizeof *v);
        if (!v) return NULL;
        t->v = v;
        t->cap = cap;
    }
    tp_ptable *out = &t->v[t->n];
    *out = (tp_ptable){strdup(title), NULL, 0, 0};
    if (!out->title) return NULL;
    t->n++;
    return out;
}

/* Row `span | protocol | transport` into `table`: 0, or -1 out of memory. */
static int tp_add_range(tp_ptable *table, char *span, const char *protocol, const char *transport) {
    if (!*span && table->n) {                       /* a protocol's further lanes */
        tp_range *last = &table->rows[table->n - 1];
        size_t had = strlen(last->transport), more = strlen(transport);
        char *joined = realloc(last->transport, had + more + 3);
        if (!joined) return -1;
        memcpy(joined + had, ", ", 2);
        memcpy(joined + had + 2, transport, more + 1);
        last->transport = joined;
        return 0;
    }
    if (strncmp(protocol, "(?) ", 4) == 0) protocol += 4;
    char *dots = strstr(span, "..");
    const char *high = dots ? dots + 2 : "";
    if (dots) *dots = 0;
    tp_range r = {0, 0, NULL, NULL, -1};
    if (!tp_size(span, &r.low) || !tp_size(*high ? high : span, &r.high)) return 0;
    if (table->n == table->cap) {
        size_t cap = table->cap ? 2 * table->cap : 8;
        tp_range *rows = realloc(table->rows, cap * sizeof *rows);
        if (!rows) return -1;
        table->rows = rows;
        table->cap = cap;
    }
    r.protocol = strdup(protocol);
    r.transport = strdup(transport);
    if (!r.protocol || !r.transport) {
        free(r.protocol);
        free(r.transport);
        return -1;
    }
    table->rows[table->n++] = r;
    return 0;
}

/* The tables of a ucp_ep_print_info text (NULL: none); NULL out of memory. */
static tp_ptables *tp_parse(const char *text) {
    tp_ptables *t = calloc(1, sizeof *t);
    char *copy = strdup(text ? text : "");
    if (!t || !copy) {
        free(copy);
        free(t);
        return NULL;
    }
    tp_ptable *current = NULL;
    int ok = 1;
    for (char *line = copy, *next; ok && *line; line = next) {
        char *end = line;
        while (*end && !tp_newline(*end)) end++;
        next = end + (*end != 0);
        if (*line != '|') continue;
        char *a = line, *b = end, *cell[3] = {NULL, NULL, NULL};
        while (a < b && *a == '|') a++;             /* the line without its outer bars, */
        while (b > a && b[-1] == '|') b--;
        size_t cells = 0;
        for (char *c = a;; c++) {                   /* cut at the others */
            if (c < b && *c != '|') continue;
            char *from = a;
            a = c + 1;
            if (cells < 3) cell[cells] = tp_strip(from, c);
            cells++;
            if (c >= b) break;
        }
        if (cells == 2)
            ok = (current = tp_table_named(t, cell[1])) != NULL;
        else if (cells == 3 && current)
            ok = tp_add_range(current, cell[0], cell[1], cell[2]) == 0;
    }
    free(copy);
    if (!ok) {
        tp_ptables_free(t);
        return NULL;
    }
    return t;
}

/* The row UCX selects for operation `ucp` of `size` bytes from host memory
 * in `t`, or NULL: in the table of the operation and variant "from" (sends)
 * or "into" (gets) host memory; RMA titles go on with the remote memory
 * (" to host"): the first such title in byte order. */
static tp_range *tp_select(const tp_ptables *t, int ucp, int64_t size) {
    const int op = ucp & 15, fast = ucp & TP_UCP_FAST, multi = ucp & TP_UCP_MULTI;
    const char *base = op < 8 ? g_titles[op] : NULL;
    if (!base || (ucp & TP_UCP_NONCONTIG)) return NULL;
    static const char *const memories[] = {" from host memory", " into host memory"};
    for (int m = 0; m < 2; m++) {
        char name[256];
        const size_t len = (size_t)snprintf(name, sizeof name, "%s%s%s%s%s%s%s%s", base,
                                            ucp & TP_UCP_REPLY ? " with reply flag" : "", fast || multi ? "(" : "",
                                            fast ? "fast-completion" : "", fast && multi ? "," : "",
                                            multi ? "multi" : "", fast || multi ? ")" : "", memories[m]);
        const tp_ptable *found = NULL;
        int exact = 0;
        for (size_t i = 0; i < t->n && !exact; i++) {
            const char *title = t->v[i].title;
            if ((exact = strcmp(title, name) == 0) ||
                (strncmp(title, name, len) == 0 && title[len] == ' ' && (!found || strcmp(title, found->title) < 0)))
                found = &t->v[i];
        }
        for (size_t k = 0; found && k < found->n; k++)
            if (found->rows[k].low <= size && size <= found->rows[k].high) return &found->rows[k];
    }
    return NULL;
}

const char *tinyprof_ucx_op_name(int ucp) { return g_ucp_names[ucp & 15]; }

static size_t tp_copy(char *to, const char *from, size_t cap) {
    const size_t n = strlen(from);
    if (cap) {
        const size_t k = n < cap ? n : cap - 1;
        memcpy(to, from, k);
        to[k] = 0;
    }
    return n;
}

int tinyprof_ucx_classify(const char *tables, int ucp, int64_t size, char *protocol, char *transport,
                          size_t cap) {
    tp_ptables *t = tp_parse(tables);
    if (!t) return -1;
    const tp_range *r = tp_select(t, ucp, size);
    const size_t p = tp_copy(protocol, r ? r->protocol : "", cap), k = tp_copy(transport, r ? r->transport : "", cap);
    tp_ptables_free(t);
    return r ? (int)(p > k ? p : k) + 1 : 0;
}

/* Appends `s` with its NUL to the strings being built: its offset, or -1. */
static int64_t tp_append(char **buf, size_t *len, size_t *cap, const char *s) {
    const size_t n = strlen(s) + 1;
    if (*len + n > *cap) {
        size_t want = *cap ? *cap : 256;
        while (want < *len + n) want *= 2;
        char *grown = realloc(*buf, want);
        if (!grown) return -1;
        *buf = grown;
        *cap = want;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    return (int64_t)(*len - n);
}

int64_t *tinyprof_ucx_rows(size_t *n, char **strings, size_t *len) {
    int64_t *rows = tp_ucx_counts(n);
    tp_ptables *parsed[TP_TEXTS] = {0};           /* by text: endpoints of one configuration share it */
    char *buf = NULL;
    size_t used = 0, cap = 0;
    int ok = rows && tp_append(&buf, &used, &cap, "") == 0;
    for (size_t i = 0; ok && i < *n; i++) {
        int64_t *r = rows + i * TP_UCX_FIELDS;
        const int ep = (int)r[TP_UCX_EP];
        const int text = ep >= 0 && ep < TP_UCX_NOEP ? atomic_load(&g_ep_text[ep]) : 0;
        if (text > 0 && !parsed[text - 1]) ok = (parsed[text - 1] = tp_parse(g_texts[text - 1])) != NULL;
        tp_range *range = ok && text > 0 ? tp_select(parsed[text - 1], (int)r[TP_UCX_UCP], r[TP_UCX_SIZE]) : NULL;
        if (range && range->at < 0) {
            const int64_t protocol = tp_append(&buf, &used, &cap, range->protocol);
            range->at = protocol < 0 ? -1 : protocol;
            ok = protocol >= 0 && tp_append(&buf, &used, &cap, range->transport) >= 0;
        }
        r[TP_UCX_PROTOCOL] = range ? range->at : 0;
        r[TP_UCX_TRANSPORT] = range ? range->at + (int64_t)strlen(range->protocol) + 1 : 0;
    }
    for (int i = 0; i < TP_TEXTS; i++)
        if (parsed[i]) tp_ptables_free(parsed[i]);
    if (!ok) {
        free(rows);
        free(buf);
        buf = NULL;
        rows = NULL;
        *n = used = 0;
    }
    *strings = buf;
    *len = used;
    return rows;
}
