/*
 * fuzz_proto.c - libFuzzer target for the control protocol (common/proto.c):
 * any bytes from a peer are a typed, validated message or a clear error.
 */
#include "common/proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the handshake's parsers say about a peer's message quotes none of it raw (it reaches logs and the peer). */
static void tame(const rs_err *e)
{
	for (const char *p = e->msg; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *msg;
	const char *type;
	rs_err err = {0};
	if (rs_proto_parse((const char *)data, size, &msg, &type, &err) != RS_OK) {
		if (!err.msg[0])
			abort();
		tame(&err);
		return 0;
	}
	rs_msg_join j;
	rs_msg_start s;
	rs_msg_progress p;
	rs_err e1 = {0}, e2 = {0}, e3 = {0};
	if (rs_proto_join(msg, &j, &e1) != RS_OK && !e1.msg[0])
		abort();
	if (rs_proto_start(msg, &s, &e2) == RS_OK) {
		if (s.rank < 0 || s.rank >= s.union_world || (int64_t)json_array_size(s.peers) != s.union_world)
			abort();
	} else if (!e2.msg[0]) {
		abort();
	}
	if (rs_proto_progress(msg, &p, &e3) != RS_OK && !e3.msg[0])
		abort();
	rs_msg_paused pa;
	rs_err e4 = {0};
	if (rs_proto_paused(msg, &pa, &e4) != RS_OK && !e4.msg[0])
		abort();
	rs_msg_staged st;
	rs_msg_resume re;
	rs_err e5 = {0}, e6 = {0}, e7 = {0}, e8 = {0}, e9 = {0};
	if (rs_proto_staged(msg, &st, &e5) == RS_OK) {
		if (!st.ok && !st.reason)
			abort();
	} else if (!e5.msg[0]) {
		abort();
	}
	if (rs_proto_resume(msg, &re, &e6) != RS_OK && !e6.msg[0])
		abort();
	rs_msg_finish fi;
	rs_err efin = {0};
	if (rs_proto_finish(msg, &fi, &efin) != RS_OK && !efin.msg[0])
		abort();
	int64_t gen, step;
	const char *why, *addr;
	if (rs_proto_generation(msg, &gen, &step, &why, &e7) != RS_OK && !e7.msg[0])
		abort();
	if (rs_proto_idle(msg, &addr, &e8) != RS_OK && !e8.msg[0])
		abort();
	int64_t dgen, drank, dstep;
	rs_err edone = {0};
	if (rs_proto_done(msg, &dgen, &drank, &dstep, &edone) == RS_OK) {
		if (dgen < 0 || drank < 0 || dstep < 0)
			abort();
	} else if (!edone.msg[0]) {
		abort();
	}
	json_t *sent;
	rs_err e10 = {0};
	if (rs_proto_migrating(msg, &gen, &sent, &e10) == RS_OK) {
		for (size_t i = 0; i < json_array_size(sent); i++)
			if (json_integer_value(json_array_get(json_array_get(sent, i), 0)) < 0)
				abort();
	} else if (!e10.msg[0]) {
		abort();
	}
	/* the handshake and the answers: what parses keeps the shapes the proofs need */
	rs_msg_join j2;
	rs_msg_reply rp;
	const char *nonce, *epoch;
	rs_err e11 = {0}, e12 = {0}, e13 = {0};
	if (rs_proto_join(msg, &j2, &e11) == RS_OK) {
		if (strlen(j2.nonce) != 32 || strlen(j2.proof) != 64 || !j2.worker[0] || strlen(j2.worker) > 63 ||
		    strpbrk(j2.worker, "\x1b\n\r\"'"))
			abort();
	} else if (!e11.msg[0]) {
		abort();
	}
	if (rs_proto_reply(msg, &rp, &e12) == RS_OK) {
		if ((rp.type == RS_MSG_REFUSED || rp.type == RS_MSG_ERROR) && !rp.reason)
			abort();
	} else if (!e12.msg[0]) {
		abort();
	}
	int64_t term;
	if (rs_proto_challenge(msg, &nonce, &epoch, &term, &e13) == RS_OK) {
		if (strlen(nonce) != 32 || strlen(epoch) != 32 || term < 0)
			abort();
	} else if (!e13.msg[0]) {
		abort();
	}
	/* a checkpoint report: what parses names plain files in the checkpoint's directory, CRCs of 32 bits */
	rs_msg_checkpointed ck;
	rs_err e14 = {0};
	if (rs_proto_checkpointed(msg, &ck, &e14) == RS_OK) {
		for (int i = 0; i < ck.nfiles; i++)
			if (!ck.files[i].file[0] || ck.files[i].file[0] == '.' || strchr(ck.files[i].file, '/') ||
			    ck.files[i].bytes < 0)
				abort();
		free(ck.files);
	} else if (!e14.msg[0] || ck.files) {
		abort();
	}
	tame(&e11);
	tame(&e12);
	tame(&e13);
	tame(&e14);
	uint64_t sums[4];
	json_t *sum = json_object_get(msg, "checksum");
	if (sum && rs_proto_checksums(sum, sums, 4, &e9) != RS_OK && !e9.msg[0])
		abort();
	json_decref(msg);
	return 0;
}
