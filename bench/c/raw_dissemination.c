/* The minimal raw-socket barrier mcd is held against under load.
 *
 * A dissemination barrier over AF_PACKET (one plain socket, recv with
 * MSG_DONTWAIT, no ring, no reliability, no epochs beyond a counter): the
 * least a barrier on raw Ethernet can do. Waiting spins on recv and calls
 * sched_yield between empty polls, which is the right policy when processes
 * outnumber cores. Run one process per node:
 *
 *   raw_dissemination IFACE RANK SIZE METHOD ITERATIONS WARMUP MAC0 MAC1 ...
 *
 * METHOD is `osu` (back-to-back barriers; mean = loop time / iterations) or
 * `paper` (timestamp, barrier, timestamp, 30 us dummy loop; mean of the
 * barrier times). Prints `mean_us <value>` on success. Frames use the local
 * experimental EtherType 0x88B6, so mcd's loss rules do not touch them.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ETHERTYPE_BASELINE 0x88B6
#define KIND_HELLO 1
#define KIND_GO 2
#define KIND_ROUND 3
#define MAX_ROUNDS 32

static int fd;
static int ifindex;
static int rank, size;
static unsigned char (*macs)[6];
static uint32_t seen[MAX_ROUNDS]; /* highest barrier number heard per round */
static int go;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void die(const char *what) {
    fprintf(stderr, "raw_dissemination: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void send_to(const unsigned char *dst, uint8_t kind, uint8_t round, uint32_t number) {
    unsigned char frame[60] = {0};
    memcpy(frame, dst, 6);
    memcpy(frame + 6, macs[rank], 6);
    frame[12] = ETHERTYPE_BASELINE >> 8;
    frame[13] = ETHERTYPE_BASELINE & 0xff;
    frame[14] = kind;
    frame[15] = round;
    frame[16] = (uint8_t)rank;
    frame[17] = (uint8_t)(rank >> 8);
    memcpy(frame + 18, &number, 4);
    struct sockaddr_ll to = {.sll_family = AF_PACKET, .sll_ifindex = ifindex, .sll_halen = 6};
    memcpy(to.sll_addr, dst, 6);
    if (sendto(fd, frame, sizeof frame, 0, (struct sockaddr *)&to, sizeof to) < 0) die("sendto");
}

/* Reads every frame waiting; returns how many. */
static int drain(int *hellos) {
    unsigned char buf[2048];
    int n = 0;
    for (;;) {
        ssize_t len = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (len < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return n;
            die("recv");
        }
        n++;
        if (len < 22) continue;
        uint32_t number;
        memcpy(&number, buf + 18, 4);
        switch (buf[14]) {
        case KIND_HELLO:
            if (hellos) hellos[buf[16] | (buf[17] << 8)] = 1;
            break;
        case KIND_GO:
            go = 1;
            break;
        case KIND_ROUND:
            go = 1;
            if (buf[15] < MAX_ROUNDS && number > seen[buf[15]]) seen[buf[15]] = number;
            break;
        }
    }
}

static void barrier(uint32_t number) {
    for (int round = 0, distance = 1; distance < size; round++, distance <<= 1) {
        send_to(macs[(rank + distance) % size], KIND_ROUND, (uint8_t)round, number);
        while (seen[round] < number) {
            if (drain(NULL) == 0 && seen[round] < number) sched_yield();
        }
    }
}

static int parse_mac(const char *s, unsigned char *mac) {
    return sscanf(s, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4], &mac[5]) == 6;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: raw_dissemination IFACE RANK SIZE osu|paper ITERATIONS WARMUP MAC0 MAC1 ...\n");
        return 2;
    }
    rank = atoi(argv[2]);
    size = atoi(argv[3]);
    int paper = strcmp(argv[4], "paper") == 0;
    long iterations = atol(argv[5]), warmup = atol(argv[6]);
    if (size < 2 || size > 65535 || rank < 0 || rank >= size || argc != 7 + size || iterations < 1 || warmup < 0 ||
        (!paper && strcmp(argv[4], "osu") != 0)) {
        fprintf(stderr, "raw_dissemination: bad arguments (need RANK < SIZE, SIZE MACs, ITERATIONS >= 1)\n");
        return 2;
    }
    macs = calloc(size, 6);
    for (int i = 0; i < size; i++)
        if (!parse_mac(argv[7 + i], macs[i])) {
            fprintf(stderr, "raw_dissemination: bad MAC '%s'\n", argv[7 + i]);
            return 2;
        }
    ifindex = if_nametoindex(argv[1]);
    if (!ifindex) die(argv[1]);
    fd = socket(AF_PACKET, SOCK_RAW, 0);
    if (fd < 0) die("socket");
    struct sockaddr_ll here = {.sll_family = AF_PACKET, .sll_protocol = htons(ETHERTYPE_BASELINE), .sll_ifindex = ifindex};
    if (bind(fd, (struct sockaddr *)&here, sizeof here) < 0) die("bind");
    drain(NULL); /* anything queued before the bind filtered by EtherType */

    /* Start: everyone says hello to node 0 every millisecond until node 0,
     * having heard all, says go (a barrier frame counts as go too). */
    if (rank == 0) {
        int *hellos = calloc(size, sizeof *hellos);
        hellos[0] = 1;
        for (int all = 0; !all;) {
            drain(hellos);
            all = 1;
            for (int i = 0; i < size; i++) all &= hellos[i];
            if (!all) usleep(200);
        }
        for (int i = 1; i < size; i++) send_to(macs[i], KIND_GO, 0, 0);
    } else {
        double last = 0;
        while (!go) {
            if (now_us() - last > 1000) {
                send_to(macs[0], KIND_HELLO, 0, 0);
                last = now_us();
            }
            if (drain(NULL) == 0) sched_yield();
        }
    }

    uint32_t number = 0;
    for (long i = 0; i < warmup; i++) barrier(++number);
    double total = 0;
    if (paper) {
        for (long i = 0; i < iterations; i++) {
            double t0 = now_us();
            barrier(++number);
            total += now_us() - t0;
            for (double d = now_us(); now_us() - d < 30.0;) {
            }
        }
    } else {
        double t0 = now_us();
        for (long i = 0; i < iterations; i++) barrier(++number);
        total = now_us() - t0;
    }
    /* Peers may still need this node's last round frames: they were sent
     * before this node left, and nothing is lost here, so exiting is safe. */
    printf("mean_us %.3f\n", total / iterations);
    return 0;
}
