/*
 * cub/cudasim_cub.cuh - the CUDA simulator's cub (tests/cudasim): the
 * device-wide primitives rowshift calls, with cub's signatures and
 * documented semantics, run as host loops queued on the caller's stream:
 *  - every primitive follows cub's temporary-storage protocol: a call with
 *    d_temp_storage == NULL only sets temp_storage_bytes (and touches
 *    nothing else); a call with less temporary storage than that query
 *    returns for its num_items fails with cudaErrorInvalidValue. The size
 *    grows with num_items for every primitive (the sort's second buffers;
 *    a 16-byte descriptor per 128 items for the single-pass scan, encode
 *    and select, as cub's decoupled look-back keeps), so storage sized for
 *    fewer items than a call passes is refused. The temporary storage is
 *    really used (the sort's buffers; the others overwrite what they asked
 *    for) and must not overlap an operand;
 *  - DeviceRadixSort::SortPairs is an LSD radix sort of 8-bit digits over
 *    the key bits [begin_bit, end_bit) only, stable (signed keys ordered as
 *    cub orders them); the four ranges and the temporary storage must not
 *    overlap;
 *  - DeviceRunLengthEncode::Encode writes the first *d_num_runs_out entries
 *    of d_unique_out and d_counts_out and nothing past them;
 *  - DeviceScan::ExclusiveSum accumulates in the input's value type, in
 *    place or not; DeviceSelect::Flagged keeps the flagged items in order.
 * Every device range is checked at the call (cudaErrorInvalidValue, with a
 * line on stderr, for memory a kernel could not use).
 *
 * Mutation hook, of this simulator's cub and not of our kernels
 * (tests/cudasim/mutate.py only): compiled with
 * -DCUDASIM_MUTATE_UNSTABLE_SORT, SortPairs reverses every run of equal keys,
 * a simulator-side emulation of an unstable sort, to show that the kernels'
 * results depend on cub's sort being stable (the real one is).
 */
#ifndef CUDASIM_CUB_CUH
#define CUDASIM_CUB_CUH

#include <cuda_runtime.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

namespace cub {
namespace cudasim_detail {

inline size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

inline bool overlap(const void *a, size_t na, const void *b, size_t nb)
{
	const char *x = (const char *)a, *y = (const char *)b;
	return na && nb && x < y + nb && y < x + na;
}

/* The temporary-storage protocol: NULL asks for the size; too little is an error. */
inline bool size_query(void *d_temp_storage, size_t &temp_storage_bytes, size_t need, cudaError_t *err,
		       const char *what)
{
	*err = cudaSuccess;
	if (!d_temp_storage) {
		temp_storage_bytes = need;
		return true;
	}
	if (temp_storage_bytes < need) {
		std::fprintf(stderr, "cudasim: %s: %zu bytes of temporary storage, %zu needed\n", what,
			     temp_storage_bytes, need);
		*err = ::cudasim::set_error(cudaErrorInvalidValue);
		return true;
	}
	return false;
}

#define CUDASIM_CUB_CHECK(p, bytes, what)                                           \
	do {                                                                        \
		cudaError_t cudasim_e = ::cudasim::check_device_range((p), (bytes), (what)); \
		if (cudasim_e != cudaSuccess)                                       \
			return cudasim_e;                                           \
	} while (0)

/* The temporary storage of a single-pass primitive for n items: a header, a 16-byte descriptor per 128 items. */
inline size_t tile_state_bytes(size_t n) { return 256 + round_up((n + 127) / 128 * 16); }

/* Does a call's temporary storage [p, p + need) overlap one of its operands (pointer, bytes)? Then it fails. */
inline bool temp_overlaps(const char *what, const void *p, size_t need,
			  std::initializer_list<std::pair<const void *, size_t>> ops)
{
	for (auto &o : ops)
		if (overlap(p, need, o.first, o.second)) {
			std::fprintf(stderr, "cudasim: %s: the temporary storage overlaps an operand\n", what);
			::cudasim::set_error(cudaErrorInvalidValue);
			return true;
		}
	return false;
}

template <typename It> using value_of = typename std::iterator_traits<It>::value_type;

/* cub's key bits: unsigned keys as they are, signed keys with the sign bit flipped. */
template <typename K> inline typename std::make_unsigned<K>::type twiddle(K k)
{
	using U = typename std::make_unsigned<K>::type;
	U u;
	std::memcpy(&u, &k, sizeof(u));
	if (std::is_signed<K>::value)
		u ^= (U)((U)1 << (sizeof(K) * 8 - 1));
	return u;
}

template <typename K, typename V>
void radix_sort(const K *kin, K *kout, const V *vin, V *vout, K *ktmp, V *vtmp, size_t n, int begin_bit, int end_bit)
{
	int passes = (end_bit - begin_bit + 7) / 8;
	if (passes == 0) {
		std::memcpy(kout, kin, n * sizeof(K));
		std::memcpy(vout, vin, n * sizeof(V));
		return;
	}
	std::vector<size_t> count(256);
	const K *ks = kin;
	const V *vs = vin;
	for (int p = 0; p < passes; p++) {
		int shift = begin_bit + 8 * p, width = end_bit - shift < 8 ? end_bit - shift : 8;
		unsigned mask = (1u << width) - 1;
		K *kd = (passes - 1 - p) % 2 == 0 ? kout : ktmp; /* the last pass lands in the outputs */
		V *vd = (passes - 1 - p) % 2 == 0 ? vout : vtmp;
		std::fill(count.begin(), count.end(), 0);
		for (size_t i = 0; i < n; i++)
			count[(unsigned)(twiddle(ks[i]) >> shift) & mask]++;
		size_t sum = 0;
		for (size_t d = 0; d < 256; d++) {
			size_t c = count[d];
			count[d] = sum;
			sum += c;
		}
		for (size_t i = 0; i < n; i++) { /* in input order: stable */
			size_t at = count[(unsigned)(twiddle(ks[i]) >> shift) & mask]++;
			kd[at] = ks[i];
			vd[at] = vs[i];
		}
		ks = kd;
		vs = vd;
	}
#ifdef CUDASIM_MUTATE_UNSTABLE_SORT
	auto bits = [&](K k) {
		auto u = twiddle(k) >> begin_bit;
		return end_bit - begin_bit >= (int)(sizeof(K) * 8) ? u : u & ((decltype(u))((decltype(u))1 << (end_bit - begin_bit)) - 1);
	};
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;
		while (j < n && bits(kout[j]) == bits(kout[i]))
			j++;
		for (size_t a = i, b = j - 1; a < b; a++, b--) {
			std::swap(kout[a], kout[b]);
			std::swap(vout[a], vout[b]);
		}
		i = j;
	}
#endif
}

} /* namespace cudasim_detail */

struct DeviceRadixSort {
	template <typename KeyT, typename ValueT, typename NumItemsT>
	static cudaError_t SortPairs(void *d_temp_storage, size_t &temp_storage_bytes, const KeyT *d_keys_in,
				     KeyT *d_keys_out, const ValueT *d_values_in, ValueT *d_values_out,
				     NumItemsT num_items, int begin_bit = 0, int end_bit = sizeof(KeyT) * 8,
				     cudaStream_t stream = 0)
	{
		namespace d = cudasim_detail;
		static_assert(std::is_integral<KeyT>::value, "cudasim's SortPairs sorts integer keys");
		const char *what = "cub::DeviceRadixSort::SortPairs";
		size_t n = num_items > 0 ? (size_t)num_items : 0;
		size_t kb = n * sizeof(KeyT), vb = n * sizeof(ValueT);
		cudaError_t e;
		if (d::size_query(d_temp_storage, temp_storage_bytes, d::round_up(kb) + d::round_up(vb) + 256, &e, what))
			return e;
		if (begin_bit < 0 || end_bit > (int)(sizeof(KeyT) * 8) || begin_bit > end_bit) {
			std::fprintf(stderr, "cudasim: %s: bits [%d, %d) of a %zu-bit key\n", what, begin_bit, end_bit,
				     sizeof(KeyT) * 8);
			return ::cudasim::set_error(cudaErrorInvalidValue);
		}
		if (n == 0)
			return cudaSuccess;
		CUDASIM_CUB_CHECK(d_temp_storage, temp_storage_bytes, "SortPairs: d_temp_storage");
		CUDASIM_CUB_CHECK(d_keys_in, kb, "SortPairs: d_keys_in");
		CUDASIM_CUB_CHECK(d_keys_out, kb, "SortPairs: d_keys_out");
		CUDASIM_CUB_CHECK(d_values_in, vb, "SortPairs: d_values_in");
		CUDASIM_CUB_CHECK(d_values_out, vb, "SortPairs: d_values_out");
		const void *r[5] = {d_keys_in, d_keys_out, d_values_in, d_values_out, d_temp_storage};
		size_t rb[5] = {kb, kb, vb, vb, temp_storage_bytes};
		for (int i = 0; i < 5; i++)
			for (int j = i + 1; j < 5; j++)
				if (d::overlap(r[i], rb[i], r[j], rb[j])) {
					std::fprintf(stderr, "cudasim: %s: overlapping ranges (in-place sorting is not supported)\n",
						     what);
					return ::cudasim::set_error(cudaErrorInvalidValue);
				}
		KeyT *ktmp = (KeyT *)d_temp_storage;
		ValueT *vtmp = (ValueT *)((char *)d_temp_storage + d::round_up(kb));
		return ::cudasim::enqueue(
			stream,
			[=] { d::radix_sort(d_keys_in, d_keys_out, d_values_in, d_values_out, ktmp, vtmp, n, begin_bit, end_bit); },
			what);
	}
};

struct DeviceRunLengthEncode {
	template <typename InputIteratorT, typename UniqueOutputIteratorT, typename LengthsOutputIteratorT,
		  typename NumRunsOutputIteratorT>
	static cudaError_t Encode(void *d_temp_storage, size_t &temp_storage_bytes, InputIteratorT d_in,
				  UniqueOutputIteratorT d_unique_out, LengthsOutputIteratorT d_counts_out,
				  NumRunsOutputIteratorT d_num_runs_out, int num_items, cudaStream_t stream = 0)
	{
		namespace d = cudasim_detail;
		static_assert(std::is_pointer<InputIteratorT>::value && std::is_pointer<UniqueOutputIteratorT>::value &&
				      std::is_pointer<LengthsOutputIteratorT>::value &&
				      std::is_pointer<NumRunsOutputIteratorT>::value,
			      "cudasim's Encode takes pointers");
		const char *what = "cub::DeviceRunLengthEncode::Encode";
		size_t n = num_items > 0 ? (size_t)num_items : 0, need = d::tile_state_bytes(n);
		cudaError_t e;
		if (d::size_query(d_temp_storage, temp_storage_bytes, need, &e, what))
			return e;
		using T = d::value_of<InputIteratorT>;
		using C = d::value_of<LengthsOutputIteratorT>;
		using R = d::value_of<NumRunsOutputIteratorT>;
		CUDASIM_CUB_CHECK(d_temp_storage, temp_storage_bytes, "Encode: d_temp_storage");
		CUDASIM_CUB_CHECK(d_in, n * sizeof(T), "Encode: d_in");
		CUDASIM_CUB_CHECK(d_unique_out, n * sizeof(*d_unique_out), "Encode: d_unique_out");
		CUDASIM_CUB_CHECK(d_counts_out, n * sizeof(C), "Encode: d_counts_out");
		CUDASIM_CUB_CHECK(d_num_runs_out, sizeof(R), "Encode: d_num_runs_out");
		if (d::temp_overlaps(what, d_temp_storage, need,
				     {{d_in, n * sizeof(T)}, {d_unique_out, n * sizeof(*d_unique_out)},
				      {d_counts_out, n * sizeof(C)}, {d_num_runs_out, sizeof(R)}}))
			return cudaErrorInvalidValue;
		return ::cudasim::enqueue(
			stream,
			[=] {
				std::memset(d_temp_storage, 0xa5, need); /* the tile descriptors */
				size_t runs = 0;
				for (size_t i = 0; i < n;) {
					size_t j = i + 1;
					while (j < n && d_in[j] == d_in[i])
						j++;
					d_unique_out[runs] = d_in[i];
					d_counts_out[runs] = (C)(j - i);
					runs++;
					i = j;
				}
				*d_num_runs_out = (R)runs;
			},
			what);
	}
};

struct DeviceScan {
	template <typename InputIteratorT, typename OutputIteratorT, typename NumItemsT>
	static cudaError_t ExclusiveSum(void *d_temp_storage, size_t &temp_storage_bytes, InputIteratorT d_in,
					OutputIteratorT d_out, NumItemsT num_items, cudaStream_t stream = 0)
	{
		namespace d = cudasim_detail;
		static_assert(std::is_pointer<InputIteratorT>::value && std::is_pointer<OutputIteratorT>::value,
			      "cudasim's ExclusiveSum takes pointers");
		const char *what = "cub::DeviceScan::ExclusiveSum";
		size_t n = num_items > 0 ? (size_t)num_items : 0, need = d::tile_state_bytes(n);
		cudaError_t e;
		if (d::size_query(d_temp_storage, temp_storage_bytes, need, &e, what))
			return e;
		using T = typename std::remove_cv<d::value_of<InputIteratorT>>::type;
		using O = d::value_of<OutputIteratorT>;
		if (n == 0)
			return cudaSuccess;
		CUDASIM_CUB_CHECK(d_temp_storage, temp_storage_bytes, "ExclusiveSum: d_temp_storage");
		CUDASIM_CUB_CHECK(d_in, n * sizeof(T), "ExclusiveSum: d_in");
		CUDASIM_CUB_CHECK(d_out, n * sizeof(O), "ExclusiveSum: d_out");
		if (d::temp_overlaps(what, d_temp_storage, need, {{d_in, n * sizeof(T)}, {d_out, n * sizeof(O)}}))
			return cudaErrorInvalidValue;
		return ::cudasim::enqueue(
			stream,
			[=] {
				std::memset(d_temp_storage, 0xa5, need); /* the tile descriptors */
				T acc = T();
				for (size_t i = 0; i < n; i++) {
					T v = d_in[i]; /* read before writing: in place works */
					d_out[i] = (O)acc;
					acc = (T)(acc + v);
				}
			},
			what);
	}
};

struct DeviceSelect {
	template <typename InputIteratorT, typename FlagIterator, typename OutputIteratorT,
		  typename NumSelectedIteratorT>
	static cudaError_t Flagged(void *d_temp_storage, size_t &temp_storage_bytes, InputIteratorT d_in,
				   FlagIterator d_flags, OutputIteratorT d_out, NumSelectedIteratorT d_num_selected_out,
				   long long num_items, cudaStream_t stream = 0)
	{
		namespace d = cudasim_detail;
		static_assert(std::is_pointer<InputIteratorT>::value && std::is_pointer<FlagIterator>::value &&
				      std::is_pointer<OutputIteratorT>::value &&
				      std::is_pointer<NumSelectedIteratorT>::value,
			      "cudasim's Flagged takes pointers");
		const char *what = "cub::DeviceSelect::Flagged";
		size_t n = num_items > 0 ? (size_t)num_items : 0, need = d::tile_state_bytes(n);
		cudaError_t e;
		if (d::size_query(d_temp_storage, temp_storage_bytes, need, &e, what))
			return e;
		using T = d::value_of<InputIteratorT>;
		using F = d::value_of<FlagIterator>;
		using S = d::value_of<NumSelectedIteratorT>;
		CUDASIM_CUB_CHECK(d_temp_storage, temp_storage_bytes, "Flagged: d_temp_storage");
		CUDASIM_CUB_CHECK(d_in, n * sizeof(T), "Flagged: d_in");
		CUDASIM_CUB_CHECK(d_flags, n * sizeof(F), "Flagged: d_flags");
		CUDASIM_CUB_CHECK(d_out, n * sizeof(*d_out), "Flagged: d_out");
		CUDASIM_CUB_CHECK(d_num_selected_out, sizeof(S), "Flagged: d_num_selected_out");
		if (d::overlap(d_in, n * sizeof(T), d_out, n * sizeof(*d_out))) {
			std::fprintf(stderr, "cudasim: %s: d_in and d_out overlap\n", what);
			return ::cudasim::set_error(cudaErrorInvalidValue);
		}
		if (d::temp_overlaps(what, d_temp_storage, need,
				     {{d_in, n * sizeof(T)}, {d_flags, n * sizeof(F)}, {d_out, n * sizeof(*d_out)},
				      {d_num_selected_out, sizeof(S)}}))
			return cudaErrorInvalidValue;
		return ::cudasim::enqueue(
			stream,
			[=] {
				std::memset(d_temp_storage, 0xa5, need); /* the tile descriptors */
				size_t k = 0;
				for (size_t i = 0; i < n; i++)
					if (d_flags[i])
						d_out[k++] = d_in[i];
				*d_num_selected_out = (S)k;
			},
			what);
	}
};

#undef CUDASIM_CUB_CHECK

} /* namespace cub */

#endif
