/*
 * A small gRPC load generator for `npm run bench:wrk` (the gRPC rows): unary calls over HTTP/2
 * cleartext with libnghttp2, in C, so that generating the load costs little CPU (on two cores a Node
 * generator takes a core from the server it measures).
 *
 * h2load would do the same framing but posts one fixed body, and the service refuses a second receipt
 * with the same (merchantId, receiptId): every call after the first would be a `conflict`. Here every
 * request body is a template (a length-prefixed gRPC message, made by the bench with the generated
 * schemas) in which each 16-byte marker "@@@@@@@@@@@@@@@@" is replaced by a fresh id of the same length
 * (the 7-character prefix given with -x, a dash, an 8-digit counter), so the message's framing never
 * changes. A call counts as a success only when the answer is HTTP 200 with `grpc-status: 0` (in the
 * trailers, or in a trailers-only answer); the first failure's status and message are printed.
 *
 *   h2grpc -h 127.0.0.1 -P 50051 -u /pkg.Service/Method -d 8 -c 8 -m 8 -x abcdefg \
 *          -H "x-api-key: ..." template1.bin [template2.bin ...]
 *
 * Prints one line: `requests N ok N failed N seconds S p50_ms X p99_ms Y`, and `first-failure: ...`.
 * Build: gcc -O2 -o h2grpc bench/h2grpc.c -lnghttp2 (Debian: libnghttp2-dev).
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MARKER "@@@@@@@@@@@@@@@@"
#define MARKER_LEN 16
#define MAX_TEMPLATES 64
#define MAX_HEADERS 16
#define MAX_CONNS 256

typedef struct {
  char *bytes;
  size_t len;
  size_t marks[8];
  int nmarks;
} Template;

typedef struct {
  char *body;
  size_t len;
  size_t off;
  double started;
  int http_status;
  int grpc_status;
} Call;

typedef struct {
  int fd;
  nghttp2_session *session;
  int alive;
  int in_flight;
} Conn;

static Template templates[MAX_TEMPLATES];
static int ntemplates = 0;
static nghttp2_nv extra[MAX_HEADERS];
static int nextra = 0;
static const char *host = "127.0.0.1";
static int port = 0;
static const char *path = "/";
static char authority[128];
static char prefix[8] = "xxxxxxx";
static double seconds = 8;
static int nconns = 8;
static int streams = 8;

static unsigned long counter = 0;
static unsigned long completed = 0, ok = 0, failed = 0, conn_errors = 0;
static double deadline = 0;
static double *latencies = NULL;
static size_t nlat = 0, caplat = 0;
static char first_failure[512] = "";
static char grpc_message[256] = "";

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what) {
  fprintf(stderr, "h2grpc: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void load_template(const char *file) {
  if (ntemplates == MAX_TEMPLATES) { fprintf(stderr, "h2grpc: too many templates\n"); exit(2); }
  FILE *f = fopen(file, "rb");
  if (f == NULL) die(file);
  Template *t = &templates[ntemplates++];
  fseek(f, 0, SEEK_END);
  t->len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  t->bytes = malloc(t->len);
  if (fread(t->bytes, 1, t->len, f) != t->len) die(file);
  fclose(f);
  t->nmarks = 0;
  for (size_t i = 0; i + MARKER_LEN <= t->len && t->nmarks < 8; i++) {
    if (memcmp(t->bytes + i, MARKER, MARKER_LEN) == 0) {
      t->marks[t->nmarks++] = i;
      i += MARKER_LEN - 1;
    }
  }
}

static ssize_t send_cb(nghttp2_session *s, const uint8_t *data, size_t length, int flags, void *user) {
  (void)s; (void)flags;
  Conn *c = user;
  ssize_t n = write(c->fd, data, length);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return NGHTTP2_ERR_WOULDBLOCK;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return n;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                         nghttp2_data_source *source, void *user) {
  (void)s; (void)id; (void)user;
  Call *call = source->ptr;
  size_t n = call->len - call->off;
  if (n > length) n = length;
  memcpy(buf, call->body + call->off, n);
  call->off += n;
  if (call->off == call->len) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

static void submit(Conn *c) {
  Template *t = &templates[counter % (unsigned long)ntemplates];
  Call *call = calloc(1, sizeof(Call));
  call->body = malloc(t->len);
  memcpy(call->body, t->bytes, t->len);
  call->len = t->len;
  call->grpc_status = -1;
  char id[MARKER_LEN + 1];
  snprintf(id, sizeof id, "%.7s-%08lu", prefix, counter % 100000000UL);
  counter++;
  for (int i = 0; i < t->nmarks; i++) memcpy(call->body + t->marks[i], id, MARKER_LEN);
  nghttp2_nv nv[6 + MAX_HEADERS];
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
  nghttp2_nv base[] = {NV(":method", "POST"), NV(":scheme", "http"), NV(":authority", authority),
                       NV(":path", path), NV("content-type", "application/grpc+proto"), NV("te", "trailers")};
  memcpy(nv, base, sizeof base);
  memcpy(nv + 6, extra, sizeof(nghttp2_nv) * (size_t)nextra);
  nghttp2_data_provider provider;
  provider.source.ptr = call;
  provider.read_callback = read_body;
  call->started = now();
  int32_t sid = nghttp2_submit_request(c->session, NULL, nv, (size_t)(6 + nextra), &provider, call);
  if (sid < 0) {
    free(call->body);
    free(call);
    c->alive = 0;
    conn_errors++;
    return;
  }
  c->in_flight++;
}

static int header_cb(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user) {
  (void)flags; (void)user;
  Call *call = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
  if (call == NULL) return 0;
  if (namelen == 7 && memcmp(name, ":status", 7) == 0) call->http_status = atoi((const char *)value);
  if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) call->grpc_status = atoi((const char *)value);
  if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0 && grpc_message[0] == '\0') {
    size_t n = valuelen < sizeof grpc_message - 1 ? valuelen : sizeof grpc_message - 1;
    memcpy(grpc_message, value, n);
    grpc_message[n] = '\0';
  }
  return 0;
}

static int close_cb(nghttp2_session *s, int32_t id, uint32_t error, void *user) {
  Conn *c = user;
  Call *call = nghttp2_session_get_stream_user_data(s, id);
  if (call == NULL) return 0;
  double t = now();
  c->in_flight--;
  if (t <= deadline) {
    completed++;
    if (error == 0 && call->http_status == 200 && call->grpc_status == 0) {
      ok++;
    } else {
      failed++;
      if (first_failure[0] == '\0')
        snprintf(first_failure, sizeof first_failure, "http %d grpc-status %d rst %u message %s",
                 call->http_status, call->grpc_status, error, grpc_message);
    }
    if (nlat == caplat) {
      caplat = caplat == 0 ? 65536 : caplat * 2;
      latencies = realloc(latencies, caplat * sizeof(double));
    }
    latencies[nlat++] = (t - call->started) * 1000.0;
  }
  free(call->body);
  free(call);
  if (t < deadline && c->alive) submit(c);
  return 0;
}

static void open_conn(Conn *c) {
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) { fprintf(stderr, "h2grpc: bad host %s\n", host); exit(2); }
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  if (c->fd < 0) die("socket");
  if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0) die("connect");
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
  nghttp2_session_callbacks *cbs;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_send_callback(cbs, send_cb);
  nghttp2_session_callbacks_set_on_header_callback(cbs, header_cb);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, close_cb);
  nghttp2_session_client_new(&c->session, cbs, c);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
                                       {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (1 << 24)}};
  nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 2);
  nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, (1 << 24));
  c->alive = 1;
  c->in_flight = 0;
  for (int i = 0; i < streams; i++) submit(c);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double percentile(double p) {
  if (nlat == 0) return 0;
  size_t i = (size_t)(p * (double)(nlat - 1));
  return latencies[i];
}

int main(int argc, char **argv) {
  int opt;
  while ((opt = getopt(argc, argv, "h:P:u:d:c:m:x:H:")) != -1) {
    switch (opt) {
      case 'h': host = optarg; break;
      case 'P': port = atoi(optarg); break;
      case 'u': path = optarg; break;
      case 'd': seconds = atof(optarg); break;
      case 'c': nconns = atoi(optarg); break;
      case 'm': streams = atoi(optarg); break;
      case 'x': snprintf(prefix, sizeof prefix, "%-7.7s", optarg); break;
      case 'H': {
        if (nextra == MAX_HEADERS) { fprintf(stderr, "h2grpc: too many headers\n"); return 2; }
        char *colon = strchr(optarg, ':');
        if (colon == NULL) { fprintf(stderr, "h2grpc: header without ':': %s\n", optarg); return 2; }
        *colon = '\0';
        char *value = colon + 1;
        while (*value == ' ') value++;
        extra[nextra++] = (nghttp2_nv){(uint8_t *)optarg, (uint8_t *)value, strlen(optarg), strlen(value),
                                       NGHTTP2_NV_FLAG_NONE};
        break;
      }
      default: fprintf(stderr, "usage: see the comment at the top of h2grpc.c\n"); return 2;
    }
  }
  if (optind == argc || port == 0 || nconns < 1 || nconns > MAX_CONNS || streams < 1) {
    fprintf(stderr, "usage: see the comment at the top of h2grpc.c\n");
    return 2;
  }
  for (int i = optind; i < argc; i++) load_template(argv[i]);
  snprintf(authority, sizeof authority, "%s:%d", host, port);
  Conn conns[MAX_CONNS];
  double started = now();
  deadline = started + seconds;
  for (int i = 0; i < nconns; i++) open_conn(&conns[i]);
  struct pollfd fds[MAX_CONNS];
  uint8_t buf[65536];
  for (;;) {
    double t = now();
    int busy = 0;
    for (int i = 0; i < nconns; i++) {
      Conn *c = &conns[i];
      fds[i].fd = c->alive ? c->fd : -1;
      fds[i].events = POLLIN;
      fds[i].revents = 0;
      if (c->alive && nghttp2_session_want_write(c->session)) fds[i].events |= POLLOUT;
      if (c->alive && c->in_flight > 0) busy = 1;
    }
    if (!busy || t > deadline + 5) break;
    if (poll(fds, (nfds_t)nconns, 100) < 0 && errno != EINTR) die("poll");
    for (int i = 0; i < nconns; i++) {
      Conn *c = &conns[i];
      if (!c->alive) continue;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        for (;;) {
          ssize_t n = read(c->fd, buf, sizeof buf);
          if (n > 0) {
            if (nghttp2_session_mem_recv(c->session, buf, (size_t)n) < 0) { c->alive = 0; conn_errors++; break; }
            continue;
          }
          if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            c->alive = 0;
            conn_errors++;
          }
          break;
        }
      }
      if (c->alive && nghttp2_session_send(c->session) != 0) { c->alive = 0; conn_errors++; }
    }
  }
  qsort(latencies, nlat, sizeof(double), cmp);
  printf("requests %lu ok %lu failed %lu connection-errors %lu seconds %.3f p50_ms %.3f p99_ms %.3f\n",
         completed, ok, failed, conn_errors, seconds, percentile(0.5), percentile(0.99));
  if (first_failure[0] != '\0') printf("first-failure: %s\n", first_failure);
  return 0;
}
