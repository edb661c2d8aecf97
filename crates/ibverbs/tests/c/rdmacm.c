/* softrdma's librdmacm.so.1 as a program compiled against the system <rdma/rdma_cma.h> and
 * linked with the system librdmacm sees it (run with softrdma's libraries first on
 * LD_LIBRARY_PATH and SOFTRDMA_IP set):
 *  - one device: id->verbs is the context rdma_get_devices gives; binding an address the
 *    device does not own fails with EADDRNOTAVAIL and leaves id->verbs NULL;
 *  - event channels: the descriptor is readable exactly while events wait (poll and epoll),
 *    EAGAIN under O_NONBLOCK; synchronous ids (NULL channel) complete in the call;
 *  - a connection inside the process, through the inline helpers of <rdma/rdma_verbs.h>
 *    (rdma_reg_msgs, rdma_post_recv/send, rdma_get_recv_comp/send_comp), with private data
 *    both ways;
 *  - a connect to a port nobody listens on: RDMA_CM_EVENT_REJECTED, status 8, the REJ's
 *    148 bytes of private data, the QP in the error state (librdmacm's ucma_modify_qp_err);
 *  - misuse: NULL and destroyed ids (EINVAL), destroying an id with an event not
 *    acknowledged or a channel with ids on it (EBUSY), an id destroyed before its QP;
 *  - rsockets fail with ENOSYS. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

#include "check.h"

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1, "bad address %s", ip);
	return a;
}

static int readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* The next event on ch, waited for with poll (at most 5 s); it must be `want`. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	CHECK(poll(&p, 1, 5000) == 1, "no event (wanted %s)", rdma_event_str(want));
	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event");
	CHECK(e->event == want, "got %s (status %d), wanted %s", rdma_event_str(e->event),
	      e->status, rdma_event_str(want));
	return e;
}

static void ack(struct rdma_cm_event *e)
{
	CHECK(rdma_ack_cm_event(e) == 0, "rdma_ack_cm_event");
}

static void devices_and_binding(const char *ip)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *other;
	struct ibv_context **list;
	struct sockaddr_in a = addr_of(ip, 0), foreign = addr_of("10.255.255.1", 0);
	int n = -1;

	CHECK(ch, "rdma_create_event_channel");
	list = rdma_get_devices(&n);
	CHECK(list && n == 1 && list[0] && !list[1], "rdma_get_devices: %d", n);
	CHECK(!strcmp(ibv_get_device_name(list[0]->device), "softrdma0"), "device name");

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(id->verbs == NULL && id->channel == ch && id->ps == RDMA_PS_TCP &&
		      id->qp_type == IBV_QPT_RC, "a new id");
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0, "bind to the device's address");
	CHECK(id->verbs == list[0], "id->verbs is rdma_get_devices' context");
	CHECK(rdma_get_src_port(id) != 0, "an ephemeral port was bound");
	CHECK(((struct sockaddr_in *)rdma_get_local_addr(id))->sin_addr.s_addr == a.sin_addr.s_addr,
	      "rdma_get_local_addr");

	CHECK(rdma_create_id(ch, &other, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	errno = 0;
	CHECK(rdma_bind_addr(other, (struct sockaddr *)&foreign) == -1 && errno == EADDRNOTAVAIL,
	      "bind to an address the device does not own");
	CHECK(other->verbs == NULL, "id->verbs stays NULL");

	/* The channel has ids: it is not destroyed. */
	errno = 0;
	rdma_destroy_event_channel(ch);
	CHECK(errno == EBUSY, "destroying a channel with ids");
	CHECK(rdma_destroy_id(other) == 0 && rdma_destroy_id(id) == 0, "rdma_destroy_id");
	errno = 0;
	CHECK(rdma_destroy_id(id) == -1 && errno == EINVAL, "a destroyed id");
	CHECK(rdma_destroy_id(NULL) == -1 && errno == EINVAL, "a NULL id");
	CHECK(rdma_bind_addr(NULL, (struct sockaddr *)&a) == -1 && errno == EINVAL, "NULL id");
	CHECK(rdma_get_cm_event(NULL, NULL) == -1 && errno == EINVAL, "NULL channel");
	rdma_free_devices(list);
	rdma_destroy_event_channel(ch);
	printf("devices and binding: ok\n");
}

static void channel_descriptor(const char *ip)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in src = addr_of(ip, 0), dst = addr_of(ip, 7999);
	struct epoll_event ev = { .events = EPOLLIN }, out;
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;
	int ep = epoll_create1(0);

	CHECK(ch && ep >= 0, "channel and epoll");
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev) == 0, "epoll_ctl");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(!readable(ch->fd) && epoll_wait(ep, &out, 1, 0) == 0, "readable with no event");
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN, "EAGAIN when non-blocking");
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 1000) == 0,
	      "rdma_resolve_addr");
	CHECK(epoll_wait(ep, &out, 1, 5000) == 1, "epoll sees the event");
	CHECK(readable(ch->fd), "readable while the event waits");
	CHECK(rdma_get_cm_event(ch, &e) == 0 && e->event == RDMA_CM_EVENT_ADDR_RESOLVED &&
		      e->status == 0 && e->id == id, "ADDR_RESOLVED");
	CHECK(!readable(ch->fd) && epoll_wait(ep, &out, 1, 0) == 0, "not readable once taken");
	CHECK(id->verbs && id->port_num == 1, "resolved: the device and port");
	/* An event not acknowledged keeps its id. */
	errno = 0;
	CHECK(rdma_destroy_id(id) == -1 && errno == EBUSY, "destroy with an event unacked");
	ack(e);
	CHECK(rdma_destroy_id(id) == 0, "destroy once acked");
	close(ep);
	rdma_destroy_event_channel(ch);
	printf("channel descriptor: ok\n");
}

static void synchronous_id(const char *ip)
{
	struct sockaddr_in src = addr_of(ip, 0), dst = addr_of(ip, 7998);
	struct rdma_addrinfo hints, *res;
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "a synchronous id");
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 1000) == 0,
	      "resolve completes in the call");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED, "id->event");
	CHECK(rdma_resolve_route(id, 1000) == 0, "route");
	CHECK(id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "id->event");
	CHECK(id->route.num_paths == 1 && id->route.path_rec->mtu >= IBV_MTU_1024,
	      "one path record");
	CHECK(rdma_destroy_id(id) == 0, "destroy (its kept event goes with it)");

	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo(ip, "7997", &hints, &res) == 0, "rdma_getaddrinfo");
	CHECK(res->ai_src_addr && res->ai_family == AF_INET && res->ai_qp_type == IBV_QPT_RC &&
		      res->ai_port_space == RDMA_PS_TCP && (res->ai_flags & RAI_PASSIVE) &&
		      ntohs(((struct sockaddr_in *)res->ai_src_addr)->sin_port) == 7997,
	      "a passive addrinfo");
	rdma_freeaddrinfo(res);
	CHECK(rdma_getaddrinfo("not-an-address", "1", &hints, &res) != 0,
	      "RAI_NUMERICHOST refuses a name");
	printf("synchronous id and addrinfo: ok\n");
}

static void connection(const char *ip)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in at = addr_of(ip, 7996), src = addr_of(ip, 0);
	struct rdma_cm_id *listener, *client, *server;
	struct rdma_conn_param p;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_event *e;
	struct ibv_mr *cmr, *smr;
	struct ibv_wc wc;
	char cbuf[64] = "hello from the client", sbuf[64];
	const char hello[] = "private data, client";
	const char reply[] = "private data, server";
	uint8_t tos = 32, ack_timeout = 16;
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;

	CHECK(rdma_create_id(ch, &listener, (void *)0x1234, RDMA_PS_TCP) == 0, "listener");
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&at) == 0, "bind");
	CHECK(rdma_listen(listener, 8) == 0, "rdma_listen");
	CHECK(rdma_create_id(ch, &client, NULL, RDMA_PS_TCP) == 0, "client");
	CHECK(rdma_set_option(client, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "TOS");
	CHECK(rdma_set_option(client, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout, 1) ==
		      0, "ACK_TIMEOUT");
	errno = 0;
	CHECK(rdma_set_option(client, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4) == -1 &&
		      errno == EINVAL, "TOS of the wrong size");
	CHECK(rdma_resolve_addr(client, (struct sockaddr *)&src, (struct sockaddr *)&at, 1000) == 0,
	      "resolve");
	ack(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(client, 1000) == 0, "route");
	ack(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));

	memset(&attr, 0, sizeof attr);
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	CHECK(rdma_create_qp(client, NULL, &attr) == 0, "rdma_create_qp with the id's own CQs");
	CHECK(client->qp && client->pd && client->send_cq && client->recv_cq &&
		      client->send_cq_channel && client->recv_cq_channel, "the id's QP, PD and CQs");
	CHECK(client->qp->pd == client->pd, "the QP is on id->pd");
	memset(&p, 0, sizeof p);
	p.private_data = hello;
	p.private_data_len = sizeof hello;
	p.responder_resources = p.initiator_depth = 1;
	p.retry_count = p.rnr_retry_count = 7;
	CHECK(rdma_connect(client, &p) == 0, "rdma_connect");

	e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	server = e->id;
	CHECK(e->listen_id == listener && server->context == (void *)0x1234,
	      "the request names its listener and inherits its context");
	CHECK(e->param.conn.private_data_len >= sizeof hello &&
		      !memcmp(e->param.conn.private_data, hello, sizeof hello),
	      "the REQ's private data");
	CHECK(server->verbs == client->verbs, "one device");
	errno = 0;
	CHECK(rdma_destroy_id(listener) == -1 && errno == EBUSY,
	      "a listener whose request is not acknowledged");
	CHECK(rdma_create_qp(server, NULL, &attr) == 0, "the server's QP");
	smr = rdma_reg_msgs(server, sbuf, sizeof sbuf);
	cmr = rdma_reg_msgs(client, cbuf, sizeof cbuf);
	CHECK(smr && cmr, "rdma_reg_msgs");
	CHECK(rdma_post_recv(server, NULL, sbuf, sizeof sbuf, smr) == 0, "rdma_post_recv");
	p.private_data = reply;
	p.private_data_len = sizeof reply;
	CHECK(rdma_accept(server, &p) == 0, "rdma_accept");
	ack(e);

	/* Both sides are established, in either order. */
	for (int seen = 0; seen < 2; seen++) {
		e = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
		CHECK(e->id == client || e->id == server, "ESTABLISHED about an id of ours");
		if (e->id == client)
			CHECK(e->param.conn.private_data_len >= sizeof reply &&
				      !memcmp(e->param.conn.private_data, reply, sizeof reply),
			      "the client's ESTABLISHED carries the REP's private data");
		ack(e);
	}

	/* The options reached the connection: the client's QP times out as set, and both QPs
	 * send with the traffic class (the server's from the REQ's path). */
	CHECK(ibv_query_qp(client->qp, &qattr, IBV_QP_TIMEOUT | IBV_QP_AV, &qinit) == 0, "query");
	CHECK(qattr.timeout == ack_timeout, "the client QP's timeout is %d", qattr.timeout);
	CHECK(qattr.ah_attr.grh.traffic_class == tos, "client traffic class %d",
	      qattr.ah_attr.grh.traffic_class);
	CHECK(client->route.path_rec->traffic_class == tos, "the path record's traffic class");
	CHECK(ibv_query_qp(server->qp, &qattr, IBV_QP_AV, &qinit) == 0, "query");
	CHECK(qattr.ah_attr.grh.traffic_class == tos, "server traffic class %d",
	      qattr.ah_attr.grh.traffic_class);
	CHECK(rdma_post_send(client, NULL, cbuf, sizeof cbuf, cmr, 0) == 0, "rdma_post_send");
	CHECK(rdma_get_send_comp(client, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "send comp");
	CHECK(rdma_get_recv_comp(server, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.byte_len == sizeof cbuf, "recv comp");
	CHECK(!strcmp(sbuf, "hello from the client"), "the bytes arrived: %s", sbuf);

	CHECK(rdma_disconnect(client) == 0, "rdma_disconnect");
	for (int seen = 0; seen < 2;) {
		e = expect(ch, RDMA_CM_EVENT_DISCONNECTED);
		CHECK(e->id == client || e->id == server, "DISCONNECTED about an id of ours");
		/* The passive side answers the DREQ (the DREP leaves), as rping and ucmatose do. */
		if (e->id == server)
			CHECK(rdma_disconnect(server) == 0, "the server's rdma_disconnect");
		seen++;
		ack(e);
	}
	rdma_dereg_mr(smr);
	rdma_dereg_mr(cmr);
	/* An id destroyed before its QP: the QP stays the program's. */
	{
		struct ibv_qp *qp = client->qp;

		client->qp = NULL;
		CHECK(rdma_destroy_id(client) == 0, "destroy an id with a QP");
		CHECK(ibv_destroy_qp(qp) == 0, "then its QP");
	}
	rdma_destroy_qp(server);
	CHECK(rdma_destroy_id(server) == 0 && rdma_destroy_id(listener) == 0, "destroy");
	rdma_destroy_event_channel(ch);
	printf("connection: ok\n");
}

static void nobody_listens(const char *ip)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in src = addr_of(ip, 0), dst = addr_of(ip, 7995);
	struct ibv_qp_init_attr attr;
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 1000) == 0,
	      "resolve");
	ack(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(id, 1000) == 0, "route");
	ack(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	memset(&attr, 0, sizeof attr);
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(id, NULL, &attr) == 0, "rdma_create_qp");
	CHECK(rdma_connect(id, NULL) == 0, "rdma_connect");
	e = expect(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(e->status == 8, "status %d, wanted 8 (invalid service ID)", e->status);
	/* The REJ's whole private data field, as the kernel reports it. */
	CHECK(e->param.conn.private_data_len == 148, "private data %d bytes, wanted 148",
	      e->param.conn.private_data_len);
	ack(e);
	{
		/* librdmacm moves the QP of a rejected connection to the error state. */
		struct ibv_qp_attr qattr;
		struct ibv_qp_init_attr qinit;

		CHECK(ibv_query_qp(id->qp, &qattr, IBV_QP_STATE, &qinit) == 0, "query");
		CHECK(qattr.qp_state == IBV_QPS_ERR, "QP state %d after REJECTED, wanted ERR",
		      qattr.qp_state);
	}
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
	printf("nobody listens: ok\n");
}

int main(void)
{
	const char *ip = getenv("SOFTRDMA_IP");

	CHECK(ip, "SOFTRDMA_IP is set");
	devices_and_binding(ip);
	channel_descriptor(ip);
	synchronous_id(ip);
	connection(ip);
	nobody_listens(ip);
	errno = 0;
	CHECK(rsocket(AF_INET, SOCK_STREAM, 0) == -1 && errno == ENOSYS, "rsocket: ENOSYS");
	CHECK(!strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT"),
	      "rdma_event_str");
	printf("rdmacm: all checks passed\n");
	return 0;
}
